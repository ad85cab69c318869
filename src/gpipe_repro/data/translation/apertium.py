"""Labelled synthetic source languages: English sentences machine-translated with apertium.

Fig. 3 of the paper needs languages with little data. Besides small real subsets, a rule-based
system can turn the English side of a corpus into, say, Catalan, giving a (synthetic Catalan,
English) corpus whose test sets stay parallel to the real ones. Such sources are machine output,
not human text: every corpus built from them says ``synthetic`` in its name and its description.

apertium runs from Debian packages unpacked into the cache (no installation): each language pair's
``.mode`` file is a shell pipeline of apertium/lttoolbox tools with absolute ``/usr/share/apertium``
paths; we point those paths, ``PATH`` and ``LD_LIBRARY_PATH`` at the unpacked trees and run
``apertium-destxt -n | <pipeline> | apertium-retxt`` on one sentence per line (what
``apertium -u -f line`` does, without the script's gawk dependency). Unknown words pass through
unmarked. Speed: ~100-200 verses per second per pair on one core.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from ...errors import UserError
from .fetch import _fetch

__all__ = ["APERTIUM_PAIRS", "apertium_translate", "mode_pipeline", "translate_cached"]

_TOOLS = [
    "apertium",
    "libapertium3",
    "lttoolbox",
    "liblttoolbox3",
    "apertium-lex-tools",
    "libapertium-lex-tools1",
    "libirstlm1",
]
# pair -> (its data package, extra tool packages its mode uses)
APERTIUM_PAIRS: dict[str, tuple[str, list[str]]] = {
    "eng-spa": ("apertium-eng-spa", []),
    "eng-cat": ("apertium-eng-cat", ["apertium-anaphora", "apertium-separable", "cg3", "libcg3-1"]),
    "en-gl": ("apertium-en-gl", []),
}
_SHARE = "/usr/share/apertium/"
_SPACE = re.compile(r"\s+")
CHUNK = 1000


def mode_pipeline(mode_text: str, data_tree: Path) -> str:
    """A ``.mode`` pipeline rewritten to read the unpacked data tree; unknown words unmarked."""
    text = mode_text.strip().replace(_SHARE, f"{data_tree}/usr/share/apertium/")
    # $1: the generator's option (-n: no '*' on unknown words), $2: the tagger's (none).
    return text.replace("$1", "-n").replace("$2", "").strip()


def _environment(trees: Sequence[Path]) -> dict[str, str]:
    env = dict(os.environ)
    bins = [str(t / "usr/bin") for t in trees if (t / "usr/bin").is_dir()]
    libs = [str(p) for t in trees for p in sorted((t / "usr/lib").glob("*-linux-gnu"))]
    env["PATH"] = os.pathsep.join([*bins, env.get("PATH", "")])
    env["LD_LIBRARY_PATH"] = os.pathsep.join([*libs, env.get("LD_LIBRARY_PATH", "")])
    return env


def apertium_translate(lines: Sequence[str], pair: str) -> list[str]:
    """Translate one sentence per line with apertium ``pair`` (e.g. ``eng-cat``)."""
    if pair not in APERTIUM_PAIRS:
        raise UserError(f"apertium pair {pair!r} is unknown; allowed: {', '.join(APERTIUM_PAIRS)}")
    data_pkg, extra = APERTIUM_PAIRS[pair]
    trees = [_fetch(name) for name in [*_TOOLS, *extra, data_pkg]]
    mode = trees[-1] / "usr/share/apertium/modes" / f"{pair}.mode"
    if not mode.exists():
        raise UserError(f"{data_pkg} has no {mode.name} in {mode.parent}")
    command = f"apertium-destxt -n | {mode_pipeline(mode.read_text(), trees[-1])} | apertium-retxt"
    # A last dummy line: apertium drops the final sentence's full stop otherwise.
    text = "".join(_SPACE.sub(" ", ln).strip() + "\n" for ln in [*lines, "."])
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        input=text,
        capture_output=True,
        text=True,
        env=_environment(trees),
        timeout=3600,
    )
    out = done.stdout.split("\n")
    if done.returncode != 0 or len(out) < len(lines) + 1:
        err = (done.stderr.strip().splitlines() or ["no error output"])[-1]
        raise UserError(f"apertium {pair} failed (exit {done.returncode}): {err}")
    return [_SPACE.sub(" ", ln).strip() for ln in out[: len(lines)]]


def translate_cached(
    lines: Sequence[str],
    pair: str,
    cache: Path,
    translate: Callable[[Sequence[str], str], list[str]] = apertium_translate,
) -> list[str]:
    """``translate`` in chunks of ``CHUNK`` lines, each cached under the hash of its input, so a
    larger request later only translates the lines it has not seen."""
    cache.mkdir(parents=True, exist_ok=True)
    out: list[str] = []
    for start in range(0, len(lines), CHUNK):
        chunk = list(lines[start : start + CHUNK])
        digest = hashlib.sha1("\n".join([pair, *chunk]).encode()).hexdigest()[:16]
        path = cache / f"{pair}-{digest}.txt"
        if path.exists():
            got = path.read_text(encoding="utf-8").split("\n")[:-1]
        else:
            got = translate(chunk, pair)
            # one temporary file per process: the first and last stages of a K >= 2 run may build
            # the same cache file at once; each replace is atomic and they write the same bytes
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text("".join(g + "\n" for g in got), encoding="utf-8")
            os.replace(tmp, path)
        if len(got) != len(chunk):
            raise UserError(
                f"apertium cache {path} holds {len(got)} lines for {len(chunk)}; delete it"
            )
        out += got
    return out
