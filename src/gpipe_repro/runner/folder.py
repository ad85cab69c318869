"""A run's folder: nothing finished in it is ever replaced by something worse (issue #18 item 2).

(Two runs *at the same time* are kept apart by the folder's lock, ``runner.lock``, taken before this
looks.) Before a run starts, ``claim`` looks at its folder:

- resuming (``train.resume``) a run that already finished — its ``metrics.json`` is ``ok`` with every
  step asked for — is a no-op: the run's results are returned untouched (and a sweep re-gathers them);
- a folder that holds a run's results (``ok``, ``interrupted``, ``diverged``, or a failure with losses)
  or its saves is refused without ``train.resume`` — one line naming the folder and the ways on:
  resume it, or run in a new folder — unless ``train.overwrite=true`` (the old results go; the old
  run's saves stay, and are never resumed from nor pruned in favour of the new run's);
- otherwise the run gets a new id (``run.json``), which its saves carry, so ``resume=auto`` and
  pruning only ever see this run's saves (``save.folder``). A resumed run keeps its folder's id.

``write`` is the runner's one way to write ``metrics.json``: a file holding more losses than the new
one — or as many, and ``ok`` where the new one is not — is never replaced; the new metrics go beside
it (``metrics.attempt-<n>.json``), and stderr says so.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig
from ..engine.events import Event
from ..errors import UserError
from ..metrics.contract import RunMetrics, load_metrics, to_json
from ..metrics.progress import PROGRESS_FILE
from ..metrics.writer import OutputError, write_run
from ..save import latest

__all__ = ["Claim", "FolderInUse", "check", "claim", "write", "RUN_FILE"]

RUN_FILE = "run.json"
METRICS = "metrics.json"
RESULT_FILES = (METRICS, "trace.json", "timeline.png", PROGRESS_FILE, RUN_FILE)


class FolderInUse(UserError):
    """The run's folder holds another run's results: nothing was run, nothing written."""


@dataclass(frozen=True)
class Claim:
    run: str | None  # this run's id (None: resuming a folder from before runs had one)
    fresh: bool  # a new run: its live record starts empty
    finished: RunMetrics | None = None  # resuming a run that already finished: its metrics


def _metrics(out: Path) -> RunMetrics | None:
    try:
        return load_metrics(out / METRICS)
    except (OSError, ValueError, TypeError):
        return None


def _held(spec: RunConfig, out: Path) -> str | None:
    """What of a run the folder holds, in words, or None when there is nothing to lose."""
    m = _metrics(out)
    if m is not None and (m.status != "failed" or m.losses):
        return f"a run's results (status {m.status}, {len(m.losses)} steps)"
    run, own = _run_id(out), Path(spec.train.save_dir) if spec.train.save_dir else None
    if latest(out / "saves") is not None or (
        run is not None and own is not None and latest(own, run) is not None
    ):
        return "an interrupted run's saves"
    return None


def check(spec: RunConfig, out: Path) -> None:
    """Refuse (one line, nothing written) to start a run over another run's results."""
    t = spec.train
    if t.resume is not None or t.overwrite:
        return
    held = _held(spec, out)
    if held is not None:
        raise FolderInUse(
            f"{out} holds {held}; continue it with train.resume=auto, run in a new folder "
            "(hydra.run.dir=...), or replace it with train.overwrite=true"
        )


def _run_id(out: Path) -> str | None:
    try:
        return str(json.loads((out / RUN_FILE).read_text())["run"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def claim(spec: RunConfig, out: Path, run_id: str | None = None) -> Claim:
    """Decide what starting ``spec`` in ``out`` means (see the module docstring); ``run_id``: a
    fresh run's id (its folder lock's, ``runner.lock``), else a new one."""
    t = spec.train
    check(spec, out)
    if t.resume is not None and not t.overwrite:
        m = _metrics(out)
        if m is not None and m.status == "ok" and len(m.losses) >= t.steps:
            return Claim(_run_id(out), fresh=False, finished=m)
        return Claim(_run_id(out), fresh=False)
    if t.overwrite:
        for name in RESULT_FILES:
            (out / name).unlink(missing_ok=True)
    run = run_id or uuid.uuid4().hex[:12]
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / RUN_FILE).write_text(json.dumps({"run": run}) + "\n")
    except OSError:
        pass  # an unwritable folder is reported when the run's files are written
    return Claim(run, fresh=True)


def write(out: Path, m: RunMetrics, events: Sequence[Event] = ()) -> list[Path]:
    """Write the run's files, unless its ``metrics.json`` would lose steps: then beside it."""
    old = _metrics(out)
    if old is None or (len(old.losses), old.status == "ok") <= (len(m.losses), m.status == "ok"):
        return write_run(out, m, events)
    n = 1
    while (out / f"metrics.attempt-{n}.json").exists():
        n += 1
    aside = out / f"metrics.attempt-{n}.json"
    try:
        aside.write_text(to_json(m) + "\n")
    except OSError as err:
        raise OutputError(f"cannot write {aside}: {err.strerror or err}") from None
    print(
        f"gpipe-run: kept {out / METRICS} ({old.status}, {len(old.losses)} steps); this attempt "
        f"({m.status}, {len(m.losses)} steps) is in {aside.name}",
        file=sys.stderr,
        flush=True,
    )
    return [aside]
