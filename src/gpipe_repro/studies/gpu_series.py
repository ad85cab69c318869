"""Tables 2 and 3 on per-layer costs measured on a GPU: a series from the profiles ``make gpu-check``
committed (``reports/gpu/profiles/*.json``, ``sim.measured.committed``).

For each of the table's models with a committed profile of the same model (its ``model_key``), every
cell of the paper's grid is simulated on those costs, cut by time as the sweeps are, over the link
figures the file names (one GPU cannot measure its link). Timing only: ``fits_memory`` is left
empty. A profile of another model (the experiment changed since): its cells fail and say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..config.compose import compose
from ..runplan.costing import model_key, simulate_plan, workload
from ..runplan.plan import plan_model
from ..sim.measured.committed import CommittedDevice, CommittedProfile, load
from ..sim.measured.link import LinkUnmeasured
from .published import throughput
from .sensitivity import at, cut_by_time, recompute_s
from .throughput_rows import Cell, ThroughputRow

__all__ = ["GPU_PROFILES", "gpu_cells", "committed_profiles"]

GPU_PROFILES = Path("reports") / "gpu" / "profiles"


def committed_profiles(folder: Path) -> list[CommittedProfile]:
    """Every committed profile in ``folder`` (none when it does not exist)."""
    return [load(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _failed(table: int, model: str, K: int, M: int, batch: int, hw: str, why: str) -> Cell:
    row = ThroughputRow(
        table, model, K, M, batch, "fixed", None, "simulated", hw, None, None, None
    )  # fmt: skip
    return Cell(row, [], False, why)


def gpu_cells(table: int, runs: Sequence[Sequence[str]], folder: Path = GPU_PROFILES) -> list[Cell]:
    """The cells of every run (``runs``: each experiment's overrides) that a committed profile in
    ``folder`` covers (see the module doc)."""
    profiles = committed_profiles(folder)
    if not profiles:
        return []
    cells: list[Cell] = []
    for overrides in runs:
        spec = compose([*overrides, "backend=sim", "hardware=tpu_v3"], cuda_available=False)
        paper = throughput(table, spec.model.name)
        if not paper:
            continue
        plan = plan_model(spec)
        key = model_key(spec, plan)
        mine = [p for p in profiles if p.model_key == key]
        stale = [p for p in profiles if p.experiment == spec.experiment_name and p not in mine]
        batch, name = spec.train.batch_size, spec.model.name
        for p in stale[:1] if not mine else []:
            why = (
                f"the profile {p.experiment} in {folder} was measured on {p.device} for another "
                "model than the experiment's now; measure it again with make gpu-check"
            )
            cells += [_failed(table, name, K, M, batch, p.label, why) for K, M in sorted(paper)]
        for p in mine:
            hw = CommittedDevice(p)
            costs = hw.cost_model(workload(spec, plan), [], 1)
            for K, M in sorted(paper):
                mb = batch // M
                try:
                    res = simulate_plan(at(spec, K, M), hw, costs, cut_by_time(costs, mb, K), mb)
                except LinkUnmeasured as err:
                    cells.append(_failed(table, name, K, M, batch, hw.name, str(err)))
                    continue
                row = ThroughputRow(
                    table, name, K, M, batch, "fixed", mb, "simulated", hw.name, None,
                    res.step_s, batch / res.step_s,
                )  # fmt: skip
                cells.append(Cell(row, res.busy_s, True, "", recompute_s(res, K)))
    return cells
