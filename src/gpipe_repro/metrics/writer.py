"""The one writer of a run's files: ``metrics.json``, ``trace.json`` and ``timeline.png``.

Every launcher (local, torchrun, SLURM) and every backend (engine, simulator) writes through here, so a
run's folder looks the same whatever produced it. ``metrics.json`` is written atomically (a temporary
file renamed into place) and always — also for a failed or interrupted run.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..engine.events import Event, chrome_trace
from ..errors import UserError
from .contract import RunMetrics, to_json
from .timeline import plot_timeline

__all__ = ["OutputError", "write_run", "write_metrics", "report_unwritable"]


class OutputError(UserError):
    """The run's folder cannot be written (missing permission, full disk, ...)."""


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from None


def write_metrics(out: Path, m: RunMetrics) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot create the run folder {out}: {err.strerror or err}") from None
    path = out / "metrics.json"
    _atomic_write(path, to_json(m) + "\n")
    return path


def write_run(out: Path, m: RunMetrics, events: Sequence[Event] = ()) -> list[Path]:
    """metrics.json, and when there are events trace.json and timeline.png (the last step kept)."""
    written = []
    if events:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputError(
                f"cannot create the run folder {out}: {err.strerror or err}"
            ) from None
        _atomic_write(out / "trace.json", json.dumps(chrome_trace(events)))
        written.append(out / "trace.json")
        last = max(e.step for e in events)
        p = m.pipeline
        title = (
            (
                f"{m.model.name if m.model else ''}  K={p.K}  M={p.M}  {p.schedule}{f' v={p.virtual_stages}' if p.virtual_stages > 1 else ''}  checkpoint={p.checkpoint}"
                f"  ({m.source}, step {last})"
            )
            if p
            else ""
        )
        try:
            plot_timeline(
                [e for e in events if e.step == last], p.K if p else 1, out / "timeline.png", title
            )
        except OSError as err:
            raise OutputError(
                f"cannot write {out / 'timeline.png'}: {err.strerror or err}"
            ) from None
        written.append(out / "timeline.png")
    written.insert(0, write_metrics(out, m))
    return written


def report_unwritable(m: RunMetrics, msg: str) -> list[Path]:
    """The folder cannot take the run's files: say so in one line, keep the numbers on stdout, and
    mark an ok run failed (its files are missing). The files written: none."""
    print(
        f"gpipe-run: error: {msg}; the run's metrics follow on stdout", file=sys.stderr, flush=True
    )
    print(to_json(m), flush=True)
    if m.status == "ok":
        m.status, m.error = "failed", msg
    return []
