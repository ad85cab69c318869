"""``make reports-status``: each committed report, the commit it was made at, and whether it is stale.

A report is **stale** — to be made again by its make target — when code its numbers come from has
changed since the commit its ``provenance.json`` records (``git diff --quiet <commit> HEAD --
<paths>``), or when that file is missing, names several commits or a tree with uncommitted changes.
Each report's dependencies are declared below as data: the paths of the measuring code (and configs)
its numbers come from, and the committed data of another report that it reads (the GPU profiles).
Rendering-only code is not among them: a page re-rendered from its CSV is
byte-identical (``tests/paper/test_rerender.py``), so a change there makes no report stale; a module
that holds both a report's collect and its page code counts whole. A change that leaves what a file
does as it was counts for nothing: a Python file whose syntax tree is the same once its comments,
docstrings (unless the report quotes them) and layout are set aside, and a YAML file that loads to
the same typed data, in the same order, under the same Hydra ``# @package`` line (``same_code``);
the reason names how many such files there were.

    python -m gpipe_repro.reports.status             # the table; exit 0
    python -m gpipe_repro.reports.status --check     # exit 1 when a report is stale
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..paper.markdown import table
from ..paper.provenance import FILE, Provenance

SRC = "src/gpipe_repro"
# What every run of the engine rests on: a job's numbers come from all of it.
TRAIN = tuple(
    f"{SRC}/{p}"
    for p in ("engine", "models", "data", "rank", "runner", "runplan", "config", "metrics",
              "save", "optim.py", "options.py", "translate")
) + ("conf/config.yaml",)  # fmt: skip
SIMULATE = tuple(f"{SRC}/{p}" for p in ("sim", "memory", "search", "runplan", "engine/schedule.py",
                                        "engine/partition.py", "models", "config")) + ("conf/hardware",)  # fmt: skip
MEASURE = f"{SRC}/measure"
# Data a report reads from another: Tables 2 and 3 simulate a series from the per-layer costs that
# make gpu-check measured and committed, so a new GPU check makes them stale too.
GPU_PROFILES = "reports/gpu/profiles"


@dataclass(frozen=True)
class Entry:
    """One committed report: its folder, the make target that makes it, its dependencies."""

    name: str
    folder: str
    make: str
    depends: tuple[str, ...]
    provenance: str = FILE  # the file in the folder that records its commit
    commit_field: str = ""  # set: that file is the report's own JSON, its commits in this field
    cuda: bool = False  # its target needs a CUDA host (``reports.remake`` leaves it out elsewhere)
    docstrings: bool = False  # its page quotes its code's docstrings: a change to one counts


def _sweep(exp: str, *extra: str) -> tuple[str, ...]:
    return (*TRAIN, f"conf/experiment/{exp}.yaml", f"{SRC}/paper/runs.py", *extra)


ENTRIES = (
    Entry("demo", "demo", "make demo-publish", _sweep("demo", f"{SRC}/paper/sweep_rows.py")),
    Entry(
        "table1",
        "table1",
        "make table1",
        (
            f"{SRC}/memory",
            f"{SRC}/models",
            f"{SRC}/engine/partition.py",
            f"{SRC}/engine/precision.py",
            f"{SRC}/engine/pipeline.py",
            f"{SRC}/studies/table1.py",
            f"{SRC}/studies/published.py",
        ),
    ),  # fmt: skip
    *(
        entry
        for n in (2, 3)
        for entry in (
            *(
                Entry(
                    f"table{n}_{m}",
                    f"table{n}_{m}",
                    f"make table{n}",
                    (*SIMULATE, *_sweep(f"table{n}_{m}", f"{SRC}/paper/sweep_rows.py")),
                )
                for m in ("amoebanet", "transformer")
            ),
            Entry(
                f"table{n}",
                f"table{n}",
                f"make table{n}",
                (
                    *SIMULATE,
                    *_sweep(f"table{n}_amoebanet"),
                    f"conf/experiment/table{n}_transformer.yaml",
                    *(f"{SRC}/paper/{f}.py" for f in ("throughput", "sweep_rows")),
                    *(f"{SRC}/studies/{f}.py" for f in ("sensitivity", "gpu_series")),
                    GPU_PROFILES,
                ),
            ),
        )
    ),  # fmt: skip
    Entry(
        "table4",
        "table4",
        "make table4",
        (
            *TRAIN,
            f"{MEASURE}/transfer_jobs.py",
            "conf/experiment/table4_pretrain.yaml",
            "conf/experiment/table4_finetune.yaml",
            f"{SRC}/paper/table4/results.py",
        ),
    ),  # fmt: skip
    Entry(
        "table5",
        "table5",
        "make table5",
        _sweep("table5", "conf/table5_run", f"{SRC}/paper/table5_rows.py"),
    ),  # fmt: skip
    Entry("fig3", "fig3", "make fig3", _sweep("fig3", "conf/mt_size", f"{SRC}/paper/fig3_rows.py")),
    Entry(
        "fig3_tricks",
        "fig3_tricks",
        "make fig3",
        _sweep(
            "fig3_tricks", "conf/experiment/fig3.yaml", "conf/mt_size", f"{SRC}/paper/fig3_rows.py"
        ),
    ),  # fmt: skip
    Entry("sim", "sim", "make validate-sim", (*TRAIN, *SIMULATE, MEASURE)),
    Entry(
        "hw",
        "hw",
        "make validate-hw",
        (
            *SIMULATE,
            f"{MEASURE}/roofline_check.py",
            f"{SRC}/paper/validate_hw/hw_rows.py",
            f"{SRC}/paper/validate_hw/uses.py",
        ),
    ),  # fmt: skip
    Entry("plan", "plan", "make validate-plan", (*TRAIN, *SIMULATE, MEASURE)),
    Entry(
        "schedules",
        "schedules",
        "make schedules",
        (
            *TRAIN,
            *SIMULATE,
            "conf/experiment/demo.yaml",
            f"{SRC}/paper/schedules.py",
            f"{SRC}/studies/schedules.py",
            f"{SRC}/studies/sensitivity.py",  # the models built and costed once per profile
        ),
    ),  # fmt: skip
    Entry(
        "engine",
        "engine",
        "make bench-engine",
        (f"{SRC}/engine", f"{SRC}/benchmark.py", "bench/engine.py"),
    ),  # fmt: skip
    Entry(
        "hostmem",
        "engine",
        "make bench-hostmem",
        (f"{SRC}/engine", f"{SRC}/benchmark.py", "bench/hostmem.py"),
        provenance="hostmem.provenance.json",
    ),  # fmt: skip
    Entry(
        "gpu",
        "gpu",
        "make gpu-check (on a CUDA host: README, GPU hosts)",
        (
            *TRAIN,
            *SIMULATE,
            f"{SRC}/benchmark.py",
            "bench/gpu_check.py",
            *(
                f"bench/gpucheck/{m}.py"
                for m in ("common", "tests", "tf32", "cells", "profiles", "engine")
            ),
            "bench/engine.py",
            "tests/engine/test_cuda.py",
            "tests/runner/test_gpu.py",
        ),
        cuda=True,
        docstrings=True,  # bench/gpu_check.py puts each check module's docstring on the page
    ),  # fmt: skip
    Entry(
        "soak",
        "soak",
        "make soak",
        (*TRAIN, f"{SRC}/runner/soak.py"),
        provenance="soak.json",
        commit_field="git_commit",
    ),  # fmt: skip
    Entry(
        "save",
        "save",
        "make bench-save",
        (f"{SRC}/save", f"{SRC}/engine", f"{SRC}/models", "bench/save.py"),
    ),  # fmt: skip
)


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60
    )


def _recorded(path: Path, field: str) -> Provenance:
    """The commits a report's own JSON records in ``field`` (``a/b`` where its runs had two)."""
    try:
        value = json.loads(path.read_text()).get(field) or ""
    except (OSError, ValueError, AttributeError):
        value = ""
    return Provenance(0, commits=tuple(c for c in str(value).split("/") if c))


def _typed(data: object) -> object:
    """Loaded YAML as a value that compares as Hydra reads it: each scalar with its type (1, 1.0 and
    true differ), each mapping as its pairs in order (a sweep's order is its jobs' order)."""
    if isinstance(data, dict):
        return [(_typed(k), _typed(v)) for k, v in data.items()]
    if isinstance(data, list):
        return [_typed(v) for v in data]
    return type(data).__name__, data


def _meaning(path: str, text: bytes, docstrings: bool) -> object:
    """What a file does, for comparing two versions: a Python file's syntax tree (comments and
    layout are not in it), without its docstrings unless ``docstrings``; a YAML file's typed data
    beside its Hydra directives (``# @package``), which are comments to YAML."""
    if path.endswith(".py"):
        tree = ast.parse(text)
        for node in ast.walk(tree) if not docstrings else ():
            body = getattr(node, "body", None)
            if (
                isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
        return ast.dump(tree)
    directives = [ln for ln in text.splitlines() if re.match(rb"#\s*@", ln)]
    return directives, _typed(yaml.safe_load(text))


@functools.lru_cache(maxsize=4096)
def same_code(root: Path, commit: str, head: str, path: str, docstrings: bool = False) -> bool:
    """Whether ``path`` does at ``head`` what it did at ``commit`` (``_meaning``); False where it is
    new, gone, neither Python nor YAML, or does not parse."""
    if not path.endswith((".py", ".yaml", ".yml")):
        return False
    versions = [
        subprocess.run(
            ["git", "-C", str(root), "show", f"{rev}:{path}"], capture_output=True, timeout=60
        )
        for rev in (commit, head)
    ]
    if any(v.returncode for v in versions):
        return False
    try:
        old, new = (_meaning(path, v.stdout, docstrings) for v in versions)
    except (SyntaxError, ValueError, yaml.YAMLError):
        return False
    return old == new


def state(root: Path, e: Entry, head: str = "HEAD") -> tuple[str, bool, str]:
    """(the report's commit, whether it is stale, why) for ``e`` in the repository at ``root``."""
    path = root / "reports" / e.folder / e.provenance
    if not path.exists():
        return "—", True, f"no {e.provenance}: made before reports recorded their commit"
    prov = (
        _recorded(path, e.commit_field)
        if e.commit_field
        else Provenance.load(path.parent, path.name)
    )
    if prov.problem():
        return ", ".join(prov.commits) or "—", True, str(prov.problem())
    commit = prov.commits[0]
    if _git(root, "cat-file", "-e", f"{commit}^{{commit}}").returncode:
        return commit, True, "its commit is not in this repository's history"
    diff = _git(root, "diff", "--name-only", commit, head, "--", *e.depends)
    if diff.returncode:
        return commit, True, f"git diff failed: {diff.stderr.strip()}"
    touched = diff.stdout.split()
    at = _git(root, "rev-parse", head).stdout.strip()  # a commit, not a name: same_code caches
    changed = [p for p in touched if not same_code(root, commit, at, p, e.docstrings)]
    alike = len(touched) - len(changed)
    also = f"; {alike} more changed only in comments, docstrings or layout" if alike else ""
    if not changed:
        return commit, False, "no code it depends on changed since" + also
    tops = sorted({"/".join(p.split("/")[:3]) for p in changed})
    return (
        commit,
        True,
        f"{len(changed)} file(s) it depends on changed since: {', '.join(tops[:6])}"
        + (f" (+{len(tops) - 6} more)" if len(tops) > 6 else "")
        + also,
    )


def report(root: Path) -> tuple[str, int]:
    """The table of every report's state, and how many are stale."""
    rows, stale = [], 0
    for e in ENTRIES:
        commit, old, why = state(root, e)
        stale += old
        rows.append([e.name, f"reports/{e.folder}/", commit, "**stale**" if old else "current",
                     f"`{e.make}`" if old else "—", why])  # fmt: skip
    return table(["report", "folder", "made at", "state", "regenerate with", "why"], rows), stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpipe_repro.reports.status", description=__doc__)
    ap.add_argument("--root", type=Path, default=Path("."), help="the repository")
    ap.add_argument("--check", action="store_true", help="exit 1 when a report is stale")
    a = ap.parse_args(argv)
    if _git(a.root, "rev-parse", "--git-dir").returncode:
        print(f"reports-status: error: --root {a.root} is not a git repository", file=sys.stderr)
        return 2
    text, stale = report(a.root)
    print(text)
    print(f"\n{stale} of {len(ENTRIES)} report(s) stale")
    return 1 if a.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
