"""Table 1's rows: every column of the paper planned by the memory model, at both precisions.

``results.csv`` (``ResultRow``): a column planned at fp32 or bf16 under each accounting of
``memory.table1``, ours beside the paper's numbers (``studies.published``); ``saved.csv`` (``SavedRow``):
the Naive-1 columns' saved activations by layer type, operation and dtype (``memory.breakdown``);
``allocator.csv`` (``AllocRow``): the planner's peak beside the CPU allocator's on a small model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..engine.precision import PRECISIONS
from ..memory.allocator import check_amoebanet
from ..memory.breakdown import amoebanet_groups, transformer_groups
from ..memory.table1 import ACCOUNTINGS, Column, largest, plan_column
from ..typed_csv import later
from .published import quote


@dataclass
class ResultRow:
    """A Table 1 column planned at one precision (ours beside the paper's)."""

    model: str
    column: str
    precision: str
    K: int
    M: int
    batch: int
    schedule: str
    checkpoint: str
    L: int
    D: int | None
    param_count: int
    paper_param_count: int
    param_memory_bytes: int
    paper_param_memory_bytes: int
    activation_bytes: int
    paper_activation_bytes: int
    weight_copy_bytes: int
    max_stage_activation_bytes: int
    max_stage_total_bytes: int
    budget_bytes: int
    fits: bool
    balance: str
    largest_L: int | None
    largest_D: int | None
    largest_param_count: int | None
    largest_max_stage_total_bytes: int | None
    note: str
    seconds: float = 0.0  # wall time to plan this row and search its largest model (measured)
    accounting: str | None = later()  # memory.table1.ACCOUNTINGS; None: a CSV from before, eager


@dataclass
class SavedRow:
    """Saved activation bytes of one layer type, operation and dtype (a Naive-1 column)."""

    model: str
    column: str
    precision: str
    layer_type: str
    kind: str
    dtype: str
    bytes: int


@dataclass
class AllocRow:
    """One stage of a small configuration: the planner's peak beside the CPU allocator's."""

    model: str
    K: int
    stage: int
    checkpoint: str
    M: int
    batch: int
    state_bytes: int
    planned_bytes: int
    measured_bytes: int
    error: float  # (planned - measured) / measured
    seconds: float = 0.0  # wall time of this configuration's check, shared by its stages


# The allocator check (``memory.allocator``): AmoebaNet-D(6, 16) on 32x32 images, batch 16, M = 4,
# K = 1 and K = 2 (4 + 8 layers), remat never and always: small enough to run in seconds.
ALLOC_MODEL, ALLOC_SIZE, ALLOC_BATCH, ALLOC_M = "amoebanet_d", (6, 16), 16, 4
ALLOC_BALANCES = {1: [12], 2: [4, 8]}


def alloc_rows() -> list[AllocRow]:
    L, D = ALLOC_SIZE
    out = []
    for K, balance in ALLOC_BALANCES.items():
        for checkpoint in ("never", "always"):
            t0 = time.perf_counter()
            checks = check_amoebanet(L, D, K, ALLOC_M, checkpoint, ALLOC_BATCH, balance)
            took = round((time.perf_counter() - t0) / len(checks), 1)
            out += [
                AllocRow(
                    f"{ALLOC_MODEL}({L}, {D}), 32x32",
                    c.K,
                    c.stage,
                    c.checkpoint,
                    c.M,
                    c.batch,
                    c.state,
                    c.planned,
                    c.measured,
                    round(c.error, 5),
                    took,
                )
                for c in checks
            ]
    return out


def _paper(c: Column, what: str) -> int:
    return round(quote(1, f"{c.model} {c.label}", what).value)


def _row(c: Column, precision: str, accounting: str = "eager") -> ResultRow:
    t0 = time.perf_counter()
    p = plan_column(c, precision=precision, accounting=accounting)
    best = largest(c, precision, accounting)
    L, D = c.size
    row = ResultRow(
        model=c.model,
        column=c.label,
        precision=precision,
        K=c.K,
        M=c.M,
        batch=c.batch,
        schedule=c.schedule,
        checkpoint=c.checkpoint,
        L=L,
        D=D or None,
        param_count=p.param_count,
        paper_param_count=_paper(c, "parameters"),
        param_memory_bytes=sum(p.state),
        paper_param_memory_bytes=_paper(c, "parameter memory"),
        activation_bytes=sum(p.activation),
        paper_activation_bytes=_paper(c, "activation memory"),
        weight_copy_bytes=sum(p.weight_copies),
        max_stage_activation_bytes=max(p.activation),
        max_stage_total_bytes=max(p.totals),
        budget_bytes=c.budget,
        fits=p.fits,
        balance="-".join(map(str, p.balance)),
        largest_L=best[0][0] if best else None,
        largest_D=(best[0][1] or None) if best else None,
        largest_param_count=best[1].param_count if best else None,
        largest_max_stage_total_bytes=max(best[1].totals) if best else None,
        note=p.oversized or ("" if p.fits else "the paper's size does not fit this budget"),
        accounting=accounting,
    )
    row.seconds = round(time.perf_counter() - t0, 1)
    print(
        f"{c.model:15s} {c.label:13s} {precision} {accounting:8s} planned in {row.seconds:.1f}s",
        flush=True,
    )
    return row


def result_rows(columns: list[Column]) -> list[ResultRow]:
    return [
        _row(c, precision, accounting)
        for c in columns
        for accounting in ACCOUNTINGS
        for precision in PRECISIONS
    ]


def saved_rows(columns: list[Column]) -> list[SavedRow]:
    out = []
    for c in columns:
        if c.label != "Naive-1":
            continue
        L, D = c.size
        for precision in PRECISIONS:
            n = c.batch / c.M
            groups = (
                amoebanet_groups(L, D, n, precision)
                if c.model == "amoebanet_d"
                else transformer_groups(L, n, precision)
            )
            out += [
                SavedRow(c.model, c.label, precision, g.layer_type, g.kind, g.dtype, g.nbytes)
                for g in groups
            ]
    return out
