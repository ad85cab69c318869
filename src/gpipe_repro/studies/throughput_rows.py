"""The rows of Tables 2 and 3 (GPipe §3): one cell of a sweep beside the paper's, as the table, its
decomposition (``paper.throughput``) and the simulator's studies (``studies.sensitivity``) read it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ThroughputRow:
    """One cell of our sweep beside the paper's; ``busy``, ``ok`` and ``error`` are the collected
    cell's own (not in the CSV: ``normalized`` None means it failed, ``why`` says why).
    ``paper_normalized``: the paper's number re-normalised to this series' reference cell."""

    table: int
    model: str
    K: int
    M: int
    batch_size: int | None
    batch_mode: str
    micro_batch: int | None
    source: str
    hardware: str
    fits_memory: bool | None
    step_s: float | None
    throughput: float | None
    reference: str | None = None
    normalized: float | None = None
    paper_normalized: float | None = None
    ratio: float | None = None
    bound: float | None = None
    balance: float | None = None
    overlap: float | None = None
    transfers: float | None = None
    efficiency: float | None = None
    config: str = ""  # the planner's pick: schedule, remat per stage, partition
    why: str = ""


@dataclass
class Cell:
    """A sweep's row as this table needs it (``recompute``: per stage; empty: not recorded)."""

    row: ThroughputRow
    busy: list[float]
    ok: bool
    error: str
    recompute: list[float] = field(default_factory=list)
