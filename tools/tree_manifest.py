"""``make tree-manifest``: write ``.tree.json`` — HEAD's short hash and every tracked file's blob name —
so that a copy of the tree sent without ``.git`` (the device tool's GPU host) records the commit its
reports came from, and ``-dirty`` when a file differs (``gpipe_repro.metrics.summary.manifest_commit``).

    python3 tools/tree_manifest.py          # refuses a tree with uncommitted changes outside reports/
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout


def main() -> int:
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)reports")
    if dirty.strip():
        first = dirty.splitlines()[0]
        print(
            f"tree-manifest: error: uncommitted changes ({first.strip()} ...); commit first",
            file=sys.stderr,
        )
        return 1
    files = {}
    for line in git("ls-files", "-s", "-z").split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, sha, _ = meta.split()
            if mode != "160000":  # a submodule has no blob
                files[path] = sha
    commit = git("rev-parse", "--short", "HEAD").strip()
    (ROOT / ".tree.json").write_text(json.dumps({"commit": commit, "files": files}) + "\n")
    print(f"tree-manifest: .tree.json for {commit} ({len(files)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
