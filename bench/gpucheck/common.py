"""What every gpu-check step shares: where it writes, whether it is the CPU dry run, one K = 1 run of
a composed configuration, and what the CUDA allocator and driver say about memory.

A step writes ``<out>/steps/<step>.json``: ``rows`` (one dict per measured case, the same keys within
a step), ``notes`` (sentences the page prints under the step's table, each from a number measured
here) and ``skipped`` (cases left out, and why: a budget spent, a plan that does not fit).

The dry run (``--dry-run``) runs every step on the CPU at tiny sizes, so CI exercises the code; its
numbers are not GPU numbers and its page says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GiB = 2**30


@dataclass
class Ctx:
    """One step's run: its folder, the dry run's switch, and the step's deadline (monotonic s)."""

    out: Path
    dry: bool
    deadline: float
    step_file: Path | None = None  # where the step's output is saved after every case

    @property
    def device(self) -> str:
        return "cpu" if self.dry else "cuda"

    def left(self) -> float:
        return self.deadline - time.monotonic()


@dataclass
class StepOutput:
    """``skipped``: cases left out by design (the budget spent, a plan that does not fit the GPU);
    ``failed``: cases that broke — the check's outcome is then "failed"."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "rows": self.rows,
            "notes": self.notes,
            "skipped": self.skipped,
            "failed": self.failed,
        }
        path.write_text(json.dumps(data, indent=1, default=str) + "\n")


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:400]


def within(
    ctx: Ctx, out: StepOutput, cases: Sequence[Any], need_s: float, fn: Callable[[Any], None]
) -> None:
    """``fn(case)`` for each case while at least ``need_s`` seconds of the step's budget are left (the
    output saved after each); the others are skipped (the budget, not a failure). A case the project refuses in one line
    (``UserError``: a plan that does not fit) is skipped with that line; one that raises anything
    else failed, and the next one runs."""
    from gpipe_repro.errors import UserError

    for case in cases:
        if ctx.left() < need_s:
            out.skipped.append(f"{case}: left out, {ctx.left():.0f} s of the step's budget left")
            continue
        try:
            fn(case)
        except UserError as err:
            out.skipped.append(f"{case}: {str(err).splitlines()[0]}"[:400])
        except Exception as err:  # noqa: BLE001 - one case's failure is a result
            out.failed.append(f"{case}: {one_line(err)}")
        if ctx.step_file is not None:  # a step killed past its budget keeps what it measured
            out.save(ctx.step_file)


def compose_for(ctx: Ctx, overrides: Sequence[str]) -> Any:
    """``overrides`` composed and validated as gpipe-run would, on this step's device (the dry run:
    as on a host without CUDA)."""
    from gpipe_repro.config.compose import compose

    return compose(
        [*overrides, "logger=none", "train.progress=false"],
        cuda_available=False if ctx.dry else None,
    )


def run_spec(ctx: Ctx, overrides: Sequence[str], folder: Path) -> Any:
    """One run of ``overrides`` in ``folder``; its ``RunMetrics`` (status ``failed`` with its one
    line when it fails). K = 1 runs in this process, so the allocator's counters here are the
    run's."""
    from gpipe_repro.runner import run

    return run(compose_for(ctx, overrides), folder)


def cuda_memory() -> dict[str, int]:
    """This process's CUDA memory as the allocator and the driver see it (bytes)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    stats = torch.cuda.memory_stats()
    return {
        "used_by_device": int(total - free),  # every process's, the CUDA context included
        "reserved": int(torch.cuda.memory_reserved()),
        "allocated": int(torch.cuda.memory_allocated()),
        "peak_allocated": int(torch.cuda.max_memory_allocated()),
        "peak_reserved": int(torch.cuda.max_memory_reserved()),
        "peak_inactive_split": int(stats.get("inactive_split_bytes.all.peak", 0)),
    }


def cuda_context_bytes() -> int:
    """What the device holds for this process outside the caching allocator — the CUDA context,
    the kernels' modules, cuDNN/cuBLAS handles: used on the device less reserved by the allocator
    (right after start-up: one small tensor, nothing else alive)."""
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    m = cuda_memory()
    return m["used_by_device"] - m["reserved"]


def cublas_workspace_bytes() -> int | None:
    """Bytes cuBLAS's workspace takes from the caching allocator (counted in
    ``max_memory_allocated``, not in the planner): allocated after a matmul less after freeing
    the workspaces; None where torch cannot free them."""
    import torch

    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is None:
        return None
    clear()
    a = torch.randn(1024, 1024, device="cuda")
    before = torch.cuda.memory_allocated()
    c = a @ a
    torch.cuda.synchronize()
    with_ws = torch.cuda.memory_allocated() - c.numel() * c.element_size()
    clear()
    del a, c
    return int(with_ws - before)


def gib(n: float | None) -> float | None:
    return None if n is None else round(n / GiB, 3)
