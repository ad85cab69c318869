"""Guards around a run: refuse what cannot fit, name a rank the kernel killed, find a rank that froze.

- ``check_memory``: before anything is allocated, the run's planned stages (``config.plan``: state,
  peak activations with the sends a transfer still holds, the optimiser step's temporaries) against
  the memory the plan was made for, less its headroom — each GPU's free memory, or this host's
  available RAM for all the ranks it runs. A run that cannot fit is refused with the plan in one
  line instead of being killed minutes later (``train.memory_check=false`` runs it anyway).
- ``oom_kills``: the kernel's count of out-of-memory kills in this cgroup, read before and after a
  launch, so a rank that died of SIGKILL is reported as killed by the OOM killer when it was.
- ``watched``: the ranks' launch under the two above — the out-of-memory kills counted, the
  heartbeats watched — and a failure that only shows a rank's echo traced to the rank that caused it.
- ``Watchdog``: every rank touches a heartbeat file once a second from a thread of its own; a rank
  whose heartbeat stops for ``pipeline.heartbeat_s`` (stopped with SIGSTOP, or frozen) is named and
  killed, which ends the run at once instead of after the process group's timeout — and the report
  names that rank, not the neighbour that was waiting for it.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..engine import RankError
from ..errors import UserError
from ..rank import HEARTBEAT_DIR
from ..runplan.plan import RunPlan

__all__ = ["check_memory", "oom_kills", "Watchdog", "watched"]

GiB = 2**30


def oom_kills() -> int | None:
    for path, key in (
        ("/sys/fs/cgroup/memory.events", "oom_kill"),
        ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
    ):
        try:
            for line in Path(path).read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
        except (OSError, ValueError):
            continue
    return None


def check_memory(plan: RunPlan) -> list[int]:
    """Raise UserError when the planned stages cannot fit; returns the planned bytes per stage."""
    p, mem = plan.spec.pipeline, plan.memory
    planned = plan.planned_bytes()
    fix = (
        "lower train.batch_size, raise pipeline.M, or use pipeline.checkpoint=always — "
        "or train.memory_check=false to run anyway"
    )
    if not mem.shared:
        worst = max(range(len(planned)), key=lambda k: planned[k])
        if planned[worst] > mem.budget():
            raise UserError(
                f"the plan needs {planned[worst] / GiB:.1f} GiB on stage {worst} but {mem.where} "
                f"has {mem.budget() / GiB:.1f} GiB for it ({min(mem.total, mem.free) / GiB:.1f} "
                f"GiB free less {mem.headroom / GiB:.1f} GiB headroom); {fix}"
            )
        return planned
    ranks = plan.world_size
    need = sum(planned) * p.replicas
    if need > mem.budget(ranks):
        per = "/".join(f"{b / GiB:.1f}" for b in planned)
        raise UserError(
            f"the plan needs {(need + mem.headroom * ranks) / GiB:.1f} GiB on this host ({ranks} "
            f"rank(s); stages {per} GiB + {mem.headroom / GiB:.1f} GiB per process) but "
            f"{mem.free / GiB:.1f} GiB is available; {fix}"
        )
    return planned


class Watchdog:
    """Follows the ranks' heartbeats (``<run>/.heartbeat/rank-<r>``: the rank's pid, touched each
    second). A rank silent for ``timeout_s`` is killed and remembered as ``frozen``."""

    def __init__(self, out: Path, timeout_s: float, interval_s: float = 1.0) -> None:
        self.dir, self.timeout_s, self.interval_s = out / HEARTBEAT_DIR, timeout_s, interval_s
        self.frozen: tuple[int, float] | None = None  # (rank, seconds silent)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        if self.timeout_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            now = time.time()
            for f in self.dir.glob("rank-*"):
                try:
                    age = now - f.stat().st_mtime
                    if age <= self.timeout_s:
                        continue
                    pid = int(f.read_text().strip() or 0)
                except (OSError, ValueError):
                    continue
                self.frozen = (int(f.name.split("-")[1]), age)
                if pid > 0:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                return


@contextmanager
def watched(out: Path, heartbeat_s: float, K: int) -> Iterator[None]:
    """Launch the ranks of a run in ``out`` inside: their heartbeats followed (``Watchdog``, silent
    for ``heartbeat_s``: killed), the kernel's out-of-memory kills counted, and a ``RankError`` raised
    again naming the rank that caused it (frozen, or killed by the OOM killer) rather than the one
    that saw it. The heartbeat folder is emptied before and after."""
    shutil.rmtree(out / HEARTBEAT_DIR, ignore_errors=True)
    kills = oom_kills()
    with Watchdog(out, heartbeat_s) as dog:
        try:
            yield
        except RankError as err:
            raise _explain(err, K, dog, kills) from None
        finally:
            shutil.rmtree(out / HEARTBEAT_DIR, ignore_errors=True)


def _explain(err: RankError, K: int, dog: Watchdog, kills_before: int | None) -> RankError:
    """Name the rank that caused the failure when the launcher can only see its echo (K: stages)."""
    if dog.frozen is not None:
        r, age = dog.frozen
        return RankError(
            r,
            f"rank {r} (stage {r % K}, replica {r // K}) stopped responding: no heartbeat for "
            f"{age:.0f} s (stopped, e.g. by SIGSTOP, or frozen); the run was stopped",
        )
    after = oom_kills()
    if kills_before is not None and after is not None and after > kills_before:
        return RankError(
            err.rank,
            f"rank {err.rank}: killed by the kernel's out-of-memory killer; the run needs "
            "more memory than this host has (see train.memory_check and the plan)",
        )
    return err
