"""Reading runs: every job's ``metrics.json`` through the typed contract (``metrics.contract``).

A job whose file is missing, unreadable or breaks the contract is kept as a failed run that says why,
so a report lists every job a sweep started. A job's start and end times are those of its files.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..metrics.contract import RunMetrics, load_metrics


@dataclass(frozen=True)
class Job:
    name: str  # the job's folder
    metrics: RunMetrics


def read_run(folder: Path) -> RunMetrics:
    """``folder/metrics.json``, or a failed run naming what is wrong with it."""
    path = folder / "metrics.json"
    if not path.exists():
        return RunMetrics(status="failed", error=f"no metrics.json in {folder}")
    try:
        return load_metrics(path)
    except (OSError, ValueError) as err:
        return RunMetrics(status="failed", error=f"unreadable metrics.json: {err}")


def read_sweep(sweep: Path) -> list[Job]:
    """Every job of a sweep folder (one sub-folder with a ``metrics.json`` per job), by folder name."""
    return [Job(p.parent.name, read_run(p.parent)) for p in sorted(sweep.glob("*/metrics.json"))]


def job_times(folder: Path) -> tuple[float | None, float | None]:
    """When a job started and ended (unix seconds): Hydra writes ``.hydra/config.yaml`` as the job
    starts, the run its ``metrics.json`` as it ends; None for a file that is not there."""

    def mtime(path: Path) -> float | None:
        return round(path.stat().st_mtime, 3) if path.exists() else None

    return mtime(folder / ".hydra" / "config.yaml"), mtime(folder / "metrics.json")


def wall_time(times: Iterable[tuple[float | None, float | None]]) -> str:
    """A sweep's measured wall time from its jobs' (start, end) times (``job_times``), in words."""
    pairs = list(times)
    first = min((s for s, _ in pairs if s is not None), default=None)
    last = max((e for _, e in pairs if e is not None), default=None)
    if first is None or last is None:
        return "Wall time of the sweep: not recorded (the jobs' folders are gone)"
    return (
        f"Wall time of the sweep (measured): {(last - first) / 60:.1f} min from the first job's "
        "start to the last job's end (the jobs' files: `.hydra/` at the start, `metrics.json` at "
        "the end)"
    )


def failures(jobs: Iterable[tuple[str, str, str | None]]) -> str:
    """The jobs (name, status, error) that did not end ok as a list, one line each, by name (a
    page's section *Jobs that did not finish*); empty if all did."""
    bad = sorted({(j, s, (e or "").replace("|", "/")[:200]) for j, s, e in jobs if s != "ok"})
    return "\n".join(f"- {j}: {s}: {e}" for j, s, e in bad)
