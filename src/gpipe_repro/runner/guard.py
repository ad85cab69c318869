"""Guards around a run: refuse what cannot fit, name a rank the kernel killed, find a rank that froze.

- ``check_memory``: before anything is allocated, the run's per-stage plan (``planner.stages``: the
  state and peak activations the engine will hold, validated against it within 10%) against the
  device's memory — each GPU, or this host's RAM for the ranks it runs. A run that cannot fit is
  refused with the plan in one line instead of being killed by the kernel minutes later
  (``train.memory_check=false`` runs it anyway).
- ``oom_kills``: the kernel's count of out-of-memory kills in this cgroup, read before and after a
  launch, so a rank that died of SIGKILL is reported as killed by the OOM killer when it was.
- ``Watchdog``: every rank touches a heartbeat file once a second from a thread of its own; a rank
  whose heartbeat stops for ``pipeline.heartbeat_s`` (stopped with SIGSTOP, or frozen) is named and
  killed, which ends the run at once instead of after the process group's timeout — and the report
  names that rank, not the neighbour that was waiting for it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from ..config import RunConfig
from ..errors import UserError
from ..rank import HEARTBEAT_DIR, Plan

__all__ = ["check_memory", "available_host_bytes", "oom_kills", "Watchdog", "PROCESS_BYTES"]

GiB = 2**30
PROCESS_BYTES = 400 * 2**20  # a rank's own footprint besides the plan: Python, torch, gloo buffers


def available_host_bytes() -> int | None:
    """Memory this process's cgroup can still get: MemAvailable, capped by a cgroup limit."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        return None
    for limit_f, usage_f in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            raw = Path(limit_f).read_text().strip()
            if raw != "max" and int(raw) < 2**60:
                left = int(raw) - int(Path(usage_f).read_text().strip())
                avail = left if avail is None else min(avail, left)
            break
        except (OSError, ValueError):
            continue
    return avail


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


def check_memory(spec: RunConfig, plan: Plan) -> list[int]:
    """Raise UserError when the planned memory cannot fit; returns the planned bytes per stage."""
    from ..planner.stages import plan_stages

    p = spec.pipeline
    mb = spec.train.batch_size // p.replicas // p.M
    if plan.info.kind == "pairs":  # translation batches count target tokens: the widest shape holds
        mb = max(
            1, mb // plan.info.tokens_per_sample
        )  # batch / max_len sentences of max_len tokens
    bal = list(p.balance) if p.balance is not None else _partition(plan, p.K, p.balance_by, mb)
    loss = plan.model.planning_loss
    kw: dict[str, Any] = dict(
        K=p.K,
        M=p.M,
        micro_batch=mb,
        schedule=p.schedule,
        checkpoint=p.checkpoint,
        optim=spec.optim.name,
        precision=spec.train.precision,
    )
    try:  # measured as the ranks will run: CUDA's kernels and autocast policy on a GPU
        stages = plan_stages(
            plan.layers, plan.info.example, loss, bal, device_type=spec.device, **kw
        )
    except Exception as err:  # noqa: BLE001 - a plan is advice: never stop a run over it
        if spec.device == "cpu":
            raise
        print(
            f"gpipe-run: planning on fake {spec.device} tensors failed ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}); planned with CPU's kernels",
            file=sys.stderr,
        )
        stages = plan_stages(plan.layers, plan.info.example, loss, bal, device_type="cpu", **kw)
    planned = [s.total for s in stages]
    fix = (
        "lower train.batch_size, raise pipeline.M, or use pipeline.checkpoint=always — "
        "or train.memory_check=false to run anyway"
    )
    if spec.device == "cuda":
        cap = torch.cuda.get_device_properties(0).total_memory
        worst = max(range(len(planned)), key=lambda k: planned[k])
        if planned[worst] > cap:
            raise UserError(
                f"the plan needs {planned[worst] / GiB:.1f} GiB on stage {worst} but a GPU here has "
                f"{cap / GiB:.1f} GiB; {fix}"
            )
        return planned
    avail = available_host_bytes()
    if avail is None:
        return planned
    need = (sum(planned) + PROCESS_BYTES * p.K) * p.replicas
    if need > avail:
        per = "/".join(f"{b / GiB:.1f}" for b in planned)
        raise UserError(
            f"the plan needs {need / GiB:.1f} GiB on this host ({spec.world_size} rank(s); stages "
            f"{per} GiB + {PROCESS_BYTES / GiB:.1f} GiB per process) but {avail / GiB:.1f} GiB is "
            f"available; {fix}"
        )
    return planned


def _partition(plan: Plan, K: int, balance_by: str, micro_batch: int) -> list[int]:
    """The partition the ranks will choose when it can be counted on meta (params, flops); for the
    measured costs (time, memory), the params partition stands in for the bound."""
    from ..engine import balance_by_cost
    from ..engine.cost import COUNTED_KINDS, layer_costs

    kind = balance_by if balance_by in COUNTED_KINDS else "params"
    return balance_by_cost(
        layer_costs(plan.layers, plan.info.example(micro_batch, "meta"), kind), K
    )


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
