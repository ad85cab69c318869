"""Per-rank function for the memory model's grid: several planned runs on one set of ranks (one
launch), each rank returning its own result of every run (imported by spawned ranks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpipe_repro.config import RunConfig
from gpipe_repro.rank import RankContext, run_rank
from gpipe_repro.runplan.plan import RunPlan


def grid(jobs: list[tuple[RunConfig, RunPlan, str]]) -> list[Any]:
    """``run_rank`` of each job in turn (the process group is joined once and kept)."""
    return [run_rank(spec, plan, RankContext(Path(out))) for spec, plan, out in jobs]
