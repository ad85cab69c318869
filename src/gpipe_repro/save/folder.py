"""Save folders on disk: names, the completion marker, ``latest``, pruning, and opening with checks.

``<dir>/save-<step>/`` is a save once its marker ``COMPLETE`` exists. The marker is written last,
after every rank's files are in the folder and the folder has its final name, and it lists every
file with its size, so a save cut short (a crash, a full disk, a truncated copy) is recognised as
such instead of loading half a model. Writes go to ``<dir>/save-<step>.tmp-<uid>/`` first (see
``write``), so a crash mid-write leaves the previous save untouched; ``latest`` ignores both
``.tmp-`` folders and folders without a marker.

A save records the run that wrote it (``run``: an id its run folder keeps across resumes). Given a run,
``latest`` and ``prune`` see that run's saves only, so a folder of saves shared by several runs (or
holding an overwritten run's) never resumes from, nor keeps, another run's save because its step
number is higher.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import SaveError

__all__ = [
    "MARKER",
    "META",
    "RNG_DIR",
    "SaveFolder",
    "latest",
    "marked",
    "run_of",
    "open_save",
    "resolve",
    "save_path",
    "prune",
    "write_json_synced",
    "rng_file",
    "fsync_dir",
    "list_files",
]

MARKER = "COMPLETE"
META = "save.json"
RNG_DIR = "rng"
FORMAT = "gpipe-repro-save"
VERSION = 1
_NAME = re.compile(r"^save-(\d+)$")


def save_path(directory: Path | str, step: int) -> Path:
    return Path(directory) / f"save-{step}"


def rng_file(stage: int, replica: int) -> str:
    return f"{RNG_DIR}/stage-{stage}.replica-{replica}.json"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_synced(path: Path, obj: Any) -> None:
    """Write JSON and flush it to the disk (a save is only complete once its bytes are there)."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def list_files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` (relative POSIX path -> size), the marker excluded."""
    return {
        p.relative_to(folder).as_posix(): p.stat().st_size
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MARKER
    }


def run_of(save: Path) -> str | None:
    """The id of the run that wrote ``save`` (None: unreadable, or written before saves had one)."""
    try:
        run = json.loads((save / META).read_text()).get("run")
    except (OSError, ValueError, AttributeError):
        return None
    return str(run) if run is not None else None


def _complete(directory: Path, run: str | None = None) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        m = _NAME.match(p.name)
        if m and (p / MARKER).is_file() and (run is None or run_of(p) == run):
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest(directory: Path | str, run: str | None = None) -> Path | None:
    """The newest complete save in ``directory`` (highest step) — of ``run`` when given — or None."""
    found = _complete(Path(directory), run)
    return found[-1][1] if found else None


def marked(directory: Path, run: str | None) -> list[tuple[int, Path]]:
    """The marked saves in ``directory`` of ``run`` (any run's where None), and those whose record
    cannot be read, whoever's: (step, path), newest first. Unlike ``latest``, a save whose run is
    unknown is listed: its record may be what is corrupt, which opening it then says."""
    found = []
    for p in directory.iterdir() if directory.is_dir() else []:
        step = p.name.removeprefix("save-")
        if step.isdigit() and (p / MARKER).is_file():
            owner = run_of(p)
            if run is None or owner is None or owner == run:
                found.append((int(step), p))
    return sorted(found, reverse=True)


def resolve(value: str, directory: Path | str, run: str | None = None) -> Path | None:
    """``train.resume``'s value: ``auto`` -> :func:`latest` of ``run`` (None: start fresh), else that
    save."""
    if value == "auto":
        return latest(directory, run)
    path = Path(value)
    if path.is_dir() and not (path / MARKER).exists() and not (path / META).exists():
        newest = latest(path)  # a folder of saves: its newest
        if newest is None:
            raise SaveError(f"train.resume={value}: no complete save-<step> folder in it")
        return newest
    return path


def prune(
    directory: Path | str, keep: int, current: Path | None = None, run: str | None = None
) -> list[Path]:
    """Delete all but the ``keep`` newest complete saves — of ``run`` when given, never another
    run's — and ``.tmp-`` folders of crashed writes."""
    if keep < 1:
        raise ValueError(f"keep={keep} is invalid; allowed: an integer >= 1")
    directory = Path(directory)
    gone = [p for _, p in _complete(directory, run)[:-keep]]
    gone += [p for p in directory.glob("save-*.tmp-*") if p.is_dir() and p != current]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


@dataclass
class SaveFolder:
    """An opened, verified save: its folder and its ``save.json``."""

    path: Path
    meta: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.meta["step"])


def open_save(path: Path | str) -> SaveFolder:
    """Check that ``path`` is a complete, intact save and read its record; else one line why."""
    path = Path(path)
    if not path.is_dir():
        raise SaveError(f"no save at {path}: the folder does not exist")
    marker = path / MARKER
    if not marker.is_file():
        raise SaveError(
            f"{path} is not a complete save (no {MARKER} marker): its writing was "
            "interrupted, or it is not a save folder; use an earlier save"
        )
    try:
        expected = json.loads(marker.read_text())["files"]
        meta = json.loads((path / META).read_text())
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SaveError(f"{path} is corrupt: cannot read {MARKER} or {META} ({err})") from None
    have = list_files(path)
    for name, size in expected.items():
        if name not in have:
            raise SaveError(f"{path} is corrupt: {name} is missing")
        if have[name] != size:
            raise SaveError(
                f"{path} is corrupt: {name} has {have[name]} bytes, {size} were written"
            )
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise SaveError(
            f"{path} is not a {FORMAT} version {VERSION} save "
            f"(format={meta.get('format')!r}, version={meta.get('version')!r})"
        )
    return SaveFolder(path, meta)
