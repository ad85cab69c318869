"""``gpipe-plan``: the fastest pipeline configuration that fits a memory cap, from the simulator.

    gpipe-plan model=amoebanet_d data=synthetic hardware=tpu_v3 plan.devices=8 plan.batch_size=128

The run's options compose and validate as ``gpipe-run``'s (``config.compose``); ``plan.*`` are the
planner's own (``plan.config``). Nothing is allocated: the model is built on the meta device, its
per-layer costs come from the hardware profile (``runner.simulated``), its memory from the memory
planner. What is searched and how it is pruned: ``plan.search``. Bad input is one line, exit 2.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ..config import RunConfig
from ..config.compose import compose
from ..config.plan import ModelPlan, plan_model
from ..data import get_data
from ..errors import UserError
from ..planner.memory import step_temporary_bytes
from ..planner.stages import layer_activations, plan_stages
from ..runner.simulated import _hardware, simulate_plan
from ..sim import CostModel, Hardware
from . import report
from .config import PlanConfig, plan_config, split_args
from .search import MODES, CachedCosts, Candidate, Space, search

__all__ = ["main", "plan"]

GiB = 2**30


def _key(spec: RunConfig, model: ModelPlan) -> str:
    return f"{spec.model!r}|{model.info!r}"  # the run's plan memoises under the same key


def _space(spec: RunConfig, model: ModelPlan, cap: int, costs: CostModel) -> Space:
    opt = spec.optim.name if spec.optim.name in ("rmsprop", "sgd", "adam") else "rmsprop"
    wd = float(getattr(spec.optim, "weight_decay", 0.0))
    acts = layer_activations(
        model.layers,
        model.info.example,
        model.model.planning_loss,
        key=_key(spec, model),
        precision=spec.train.precision,
    )
    unit = model.info.tokens_per_sample if get_data(spec.data.name).batch_tokens else 1
    return Space(
        layers=acts,
        params=[sum(p.numel() for p in layer.parameters()) for layer in model.layers],
        optim=opt,
        costs=CachedCosts(costs),
        cap=cap,
        unit=unit,
        step_bytes=lambda n: step_temporary_bytes(n, opt, wd, "cpu"),
    )


def _exact(spec: RunConfig, model: ModelPlan, space: Space, c: Candidate) -> tuple[int, ...]:
    """The candidate's per-stage peak, planned exactly (``planner.stages.plan_stages``)."""
    stages = plan_stages(
        model.layers,
        model.info.example,
        model.model.planning_loss,
        c.balance,
        K=c.K,
        M=c.M,
        micro_batch=max(1, c.micro_batch // space.unit),
        schedule=c.schedule,
        checkpoint=list(c.checkpoint),
        optim=space.optim,
        key=_key(spec, model),
        precision=spec.train.precision,
    )
    return tuple(s.total for s in stages)


def _nothing_fits(space: Space, K: int, M: int, cap: int) -> str:
    """One line naming the smallest need per stage: the least-memory partition of K stages at
    one sample per micro-batch, 1f1b, remat always."""
    import numpy as np

    from ..engine.partition import balance_by_cells

    mem = space.memory("1f1b", "always", K, M, 1)
    bal = balance_by_cells(np.where(space.valid, mem, np.inf))
    need, start = [], 0
    for k, b in enumerate(bal):
        need.append(mem[k, start, start + b])
        start += b
    gib = ", ".join(f"{n / 2**20:.3f}" for n in need)
    return (
        f"plan.memory_gib={cap / GiB:.3g}: no configuration fits; the least any needs (K={K}, one "
        f"sample per micro-batch, 1f1b, remat {MODES[1]}, balance {'-'.join(map(str, bal))}) is "
        f"[{gib}] MiB per stage; raise plan.memory_gib or plan.devices"
    )


def plan(argv: list[str]) -> tuple[list[Candidate], str]:
    """Search; the ranked candidates and the text printed (raises UserError)."""
    mine, run_args = split_args(argv)
    pc: PlanConfig = plan_config(mine)
    spec = compose([*run_args, "backend=sim"])
    if pc.batch_size not in (None, "fit"):
        spec = replace(spec, train=replace(spec.train, batch_size=int(pc.batch_size)))
    model = plan_model(spec)
    L = len(model.layers)
    if pc.devices > L:
        raise UserError(
            f"plan.devices={pc.devices} exceeds the model's {L} layers; allowed: 1..{L} "
            "(one stage per device at most)"
        )
    hw: Hardware
    hw, costs = _hardware(spec, model)
    cap = int(pc.memory_gib * GiB) if pc.memory_gib is not None else hw.memory_bytes
    if cap <= 0:
        raise UserError(f"hardware={hw.name} states no memory; set plan.memory_gib")
    space = _space(spec, model, cap, costs)
    batch = None if pc.batch_size == "fit" else spec.train.batch_size

    def simulate(c: Candidate) -> tuple[float, float]:
        s = replace(spec, pipeline=replace(spec.pipeline, K=c.K, M=c.M, schedule=c.schedule))
        r = simulate_plan(s, hw, space.costs, c.balance, c.micro_batch, c.checkpoint)
        return r.step_s, r.bubble_fraction

    ranked, stats = search(space, pc.devices, batch, pc.max_m, pc.top, simulate)
    shown = []
    for c in ranked:  # the shown rows, planned exactly; never one over the cap
        exact = _exact(spec, model, space, c)
        if max(exact) <= cap:
            shown.append(replace(c, stage_bytes=exact))
    shown.sort(key=lambda c: (-c.samples_per_s, max(c.stage_bytes)))  # ties: the least memory
    if not shown:
        raise UserError(_nothing_fits(space, min(pc.devices, L), pc.max_m, cap))
    summary = (
        f"{spec.model.name} on hardware={hw.name}, {pc.devices} device(s), cap "
        f"{cap / GiB:.2f} GiB per device, batch "
        f"{'fit' if batch is None else batch}, precision {spec.train.precision}; predicted by the "
        "simulator (replicas: the gradient all-reduce is not simulated, as with backend=sim)"
    )
    cmd = report.command([*run_args, "backend=sim"], shown[0])
    text = "\n".join(
        [
            summary,
            "",
            report.table(shown, cap),
            "",
            report.why(shown),
            "",
            "the pick: " + cmd,
            report.search_line(stats),
        ]
    )
    report.write(Path(pc.out), shown, stats, cap, summary, cmd)
    return shown, text


def main(argv: list[str] | None = None) -> int:
    try:
        _, text = plan(list(sys.argv[1:] if argv is None else argv))
    except UserError as err:
        print(f"gpipe-plan: error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
