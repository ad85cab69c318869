"""Planned against measured per-stage peak memory, with and without one micro-batch's working set.

For the validation models' small stages (the imbalanced model's 96x96 conv stage, a Transformer-LM
stage, an AmoebaNet stage), K = 1 and 2, remat never and always, M = 1 and 4: the memory planner's
peak (``memory.stages.plan_stages``) beside the CPU allocator's (``memory.allocator.check_stages``,
fill-drain replay of one step under the profiler, one process), and the planner's peak without the
working set (``StageActivation.work``/``work_fixed`` set to 0: the planner before issue #19's
item 4 finding). Prints one markdown row per stage.
Usage: python -m experiments.memback.compare
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch

from gpipe_repro.measure.models import model
from gpipe_repro.memory import allocator, stages
from gpipe_repro.memory.activations import StageActivation
from gpipe_repro.models import class_planning_loss, token_planning_loss

MIB = 2**20

# (model, layers taken, balance at K = 1, at K = 2): small stages, so the grid runs in a minute
CASES: list[tuple[str, slice, list[int], list[int]]] = [
    ("imbalanced", slice(5, 9), [4], [1, 3]),
    ("transformer", slice(0, 8), [8], [4, 4]),
    ("amoebanet", slice(0, 9), [9], [5, 4]),
]
N = 16


def inputs(name: str, first: int) -> tuple[list[torch.nn.Module], list[torch.nn.Module], Any]:
    """The real and meta layers from ``first`` on, and the mini-batch those layers receive."""
    vm = model(name)
    layers, meta = vm.layers(), vm.meta_layers()
    return layers[first:], meta[first:], vm.received(layers, first, N)


def loss_of(name: str) -> Any:
    return token_planning_loss if name == "transformer" else class_planning_loss


@contextlib.contextmanager
def without_working_set() -> Iterator[None]:
    """The planner as it was: every measured stage's working set read as 0."""
    measure = stages.measure_stage

    def old(*args: Any, **kwargs: Any) -> tuple[StageActivation, Any]:
        a, y = measure(*args, **kwargs)
        return replace(a, work=0, work_fixed=0), y

    stages.measure_stage = old  # type: ignore[assignment]
    try:
        yield
    finally:
        stages.measure_stage = measure


def main() -> None:
    print(
        "| model | K | stage | remat | M | measured MiB | planned before | error | planned now | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, part, one, two in CASES:
        for balance in (one, two):
            for checkpoint in ("never", "always"):
                for M in (1, 4):
                    layers, meta, x = inputs(name, part.start)
                    now = allocator.check_stages(
                        layers, meta, x, loss_of(name), balance, M, checkpoint
                    )
                    with without_working_set():
                        stages._MEASURED.clear()
                        before = stages.plan_stages(
                            meta,
                            lambda n, d, x=x: torch.empty(
                                (n, *x.shape[1:]), dtype=x.dtype, device=d
                            ),
                            loss_of(name),
                            balance,
                            K=len(balance),
                            M=M,
                            micro_batch=N // M,
                            schedule="gpipe",
                            checkpoint=checkpoint,
                        )
                    for c, b in zip(now, before, strict=True):
                        print(
                            f"| {name} | {c.K} | {c.stage} | {checkpoint} | {M} | "
                            f"{c.measured / MIB:.3f} | {b.total / MIB:.3f} | "
                            f"{(b.total - c.measured) / c.measured:+.1%} | {c.planned / MIB:.3f} | "
                            f"{c.error:+.1%} |"
                        )


if __name__ == "__main__":
    main()
