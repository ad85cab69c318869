"""``train.batch_mode=fit``: the largest mini-batch whose every stage fits the device's memory at this K.

The paper's Table 2 caption: "batch size was adjusted to fit memory if necessary". Per stage k the
planned memory (``planner.stages``, on the meta device) is its state (weights, gradients, optimiser
slots: fixed) plus its peak activations, linear in the micro-batch n: ``state_k + a_k * n``. So the
largest micro-batch is a closed form, ``min_k floor((memory - state_k) / a_k)``, and the mini-batch is
that times M (and the replicas). The partition may depend on the micro-batch (``balance_by=time``
costs layers at it), so partition and fit alternate until they agree (at most a few rounds).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from ..config import RunConfig
from ..errors import UserError
from ..planner.stages import StagePlan

__all__ = ["fit_micro_batch", "host_memory_bytes", "GiB"]

GiB = 2**30
ROUNDS = 4


def _size(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB / 10 else f"{n / 2**20:.1f} MiB"


def host_memory_bytes() -> int:
    """Physical memory of this machine (what ``hardware=measured`` on a CPU calls device memory)."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def fit_micro_batch(
    spec: RunConfig,
    memory_bytes: int,
    start: int,
    balance_at: Callable[[int], list[int]],
    plan_at: Callable[[Sequence[int], int], list[StagePlan]],
    where: str,
) -> tuple[int, list[int]]:
    """The largest micro-batch (and its partition) whose every stage fits ``memory_bytes``.

    ``balance_at(n)``: the partition at micro-batch n; ``plan_at(balance, n)``: the stages' memory.
    Raises a one-line ``UserError`` naming the stage when not even one sample fits."""
    n, seen = max(1, start), set()
    for _ in range(ROUNDS):
        balance = balance_at(n)
        plans = plan_at(balance, 1)
        fits = []
        for k, st in enumerate(plans):
            free = memory_bytes - st.state
            if free < st.per_sample or st.per_sample <= 0 and free < 0:
                raise UserError(
                    f"train.batch_mode=fit: no batch fits {where} ({_size(memory_bytes)} per device) at "
                    f"pipeline.K={spec.pipeline.K}: stage {k} needs {_size(st.state)} of weights and "
                    f"optimiser state + {_size(st.per_sample)} per sample; raise pipeline.K or use "
                    "train.batch_mode=fixed"
                )
            fits.append(int(free // st.per_sample) if st.per_sample > 0 else 1 << 30)
        best = min(fits)
        if best == n or (best, tuple(balance)) in seen:
            return best, balance
        seen.add((best, tuple(balance)))
        n = best
    return n, balance_at(n)
