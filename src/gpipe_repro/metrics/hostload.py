"""The host's load during a run: how long the run's ranks waited for a core.

A prediction (``train.predict``) is made from costs profiled on a quiet core; when other jobs share
the host, the ranks' threads sit in the run queue and the measured step grows by time no profile
holds. So each rank reads the scheduler's own accounting of its threads before and after its steps:
``/proc/<pid>/task/<tid>/schedstat`` gives, per thread, the nanoseconds it ran on a core, the
nanoseconds it waited in a run queue while runnable, and its time slices (``proc(5)``,
``Documentation/scheduler/sched-stats.rst``). Summed over the ranks' threads,

    wait share = run-queue wait / (run-queue wait + time on a core)

is the share of the time the ranks wanted a core that they spent waiting for one. It is divided by
the time the threads were runnable rather than by wall time x threads, so that a rank's idle helper
threads (gloo's, the progress follower's) and its waits on a neighbour's activations, which need no
core, do not dilute it. Where ``/proc`` has no schedstat (not Linux, or a kernel without
``CONFIG_SCHED_INFO``) the load is unknown (None), never guessed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .contract import PredictionInfo

__all__ = [
    "BUSY_WAIT_SHARE",
    "Sched",
    "read_sched",
    "SchedWindow",
    "Watch",
    "wait_share",
    "busy_sentence",
    "compare",
]

# A run whose ranks waited for a core this share of their runnable time or more ran on a busy host:
# its measured step holds that much time no profile holds, so a gap between prediction and
# measurement is the host's before it is the simulator's.
BUSY_WAIT_SHARE = 0.10

PROC = Path("/proc")


@dataclass(frozen=True)
class Sched:
    """One process's threads' scheduler accounting at one moment (seconds, summed over threads)."""

    run_s: float  # on a core
    wait_s: float  # runnable, waiting in a run queue
    threads: int


def read_sched(pid: int | str = "self", proc: Path = PROC) -> Sched | None:
    """Sum ``schedstat`` over the threads of ``pid``; None where ``proc`` has none to read."""
    run = wait = 0
    n = 0
    try:
        tasks = sorted((proc / str(pid) / "task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
            run += int(fields[0])
            wait += int(fields[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended between the listing and the read
        n += 1
    if n == 0:
        return None
    return Sched(run / 1e9, wait / 1e9, n)


@dataclass
class SchedWindow:
    """A rank's threads over a stretch of its run: what ``read_sched`` read before and after."""

    run_s: float
    wait_s: float
    threads: int  # threads seen at the end
    wall_s: float

    @classmethod
    def between(
        cls, before: Sched | None, after: Sched | None, wall_s: float
    ) -> SchedWindow | None:
        if before is None or after is None:
            return None
        # threads that ended in between take their counts with them: never below zero
        return cls(
            max(0.0, after.run_s - before.run_s),
            max(0.0, after.wait_s - before.wait_s),
            after.threads,
            wall_s,
        )


class Watch:
    """Reads this process's threads at ``start`` and ``stop`` (``SchedWindow``)."""

    def __init__(self, proc: Path = PROC) -> None:
        self.proc = proc
        self.before: Sched | None = None
        self.t0 = 0.0

    def start(self) -> None:
        self.before = read_sched("self", self.proc)
        self.t0 = time.perf_counter()

    def stop(self) -> SchedWindow | None:
        after = read_sched("self", self.proc)
        return SchedWindow.between(self.before, after, time.perf_counter() - self.t0)


def wait_share(windows: list[SchedWindow | None]) -> float | None:
    """The ranks' run-queue wait over their runnable time (module doc); None when any rank's is
    unknown or none ran."""
    if not windows or any(w is None for w in windows):
        return None
    wait = sum(w.wait_s for w in windows if w is not None)
    run = sum(w.run_s for w in windows if w is not None)
    return wait / (wait + run) if wait + run > 0 else None


def busy_sentence(share: float | None, error: float | None) -> str | None:
    """The sentence a run's summary adds when the host was busy enough (``BUSY_WAIT_SHARE``) that
    the gap ``error`` (predicted / measured - 1) does not measure the simulator; None else. A run
    slower than predicted (``error`` < 0) waited for the cores the profile had: the gap is the
    host's. One faster than predicted shared the cores too, and so may have the profiling behind
    its prediction (made after the run, on the same host)."""
    if share is None or share < BUSY_WAIT_SHARE:
        return None
    busy = (
        f"the host was busy: the ranks waited for a core {share:.0%} of the time they were "
        f"runnable (>= {BUSY_WAIT_SHARE:.0%})"
    )
    if error is not None and error < 0:
        return f"{busy}, so the {error:+.0%} gap is the host's, not the simulator's"
    gap = f"the {error:+.0%} gap" if error is not None else "a gap"
    return (
        f"{busy}; the run and the profiling behind its prediction shared the cores with other "
        f"work, so {gap} does not measure the simulator"
    )


def compare(predicted_s: float, measured_s: float, wait_share: float | None) -> PredictionInfo:
    """The prediction against the measurement, with the host's load (``busy_sentence``)."""
    error = predicted_s / measured_s - 1.0
    return PredictionInfo(
        predicted_step_time_s=predicted_s,
        measured_step_time_s=measured_s,
        error=error,
        host_wait_share=wait_share,
        host_busy=None if wait_share is None else wait_share >= BUSY_WAIT_SHARE,
        note=busy_sentence(wait_share, error),
    )
