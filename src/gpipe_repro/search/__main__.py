"""``gpipe-plan``: the fastest pipeline configuration that fits a memory cap, from the simulator.

    gpipe-plan model=amoebanet_d data=synthetic hardware=tpu_v3 plan.devices=8 plan.batch_size=128

The run's options compose and validate as ``gpipe-run``'s (``config.compose``); ``plan.*`` are the
planner's own (``search.options``). Nothing is allocated: the model is built on the meta device, its
per-layer costs come from the hardware profile (``runplan.costing``), its memory from the memory
planner. What is searched: ``search.scan``; how it is pruned: ``search.space``. Bad input is one
line, exit 2.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from ..config.compose import compose
from ..errors import UserError
from ..runplan.costing import run_hardware
from ..runplan.model import plan_model
from . import report
from .candidate import Candidate
from .choose import rank_configurations
from .options import PlanConfig, plan_config, split_args, usage

__all__ = ["main", "plan"]

GiB = 2**30


def plan(argv: list[str]) -> tuple[list[Candidate], str]:
    """Search; the ranked candidates and the text printed (raises UserError)."""
    mine, run_args = split_args(argv)
    pc: PlanConfig = plan_config(mine)
    spec = compose([*run_args, "backend=sim"])
    if pc.batch_size not in (None, "fit"):
        spec = replace(spec, train=replace(spec.train, batch_size=int(pc.batch_size)))
    if pc.devices is None:
        raise UserError("plan.devices=None: gpipe-plan needs a count; allowed: an integer >= 1")
    model = plan_model(spec)
    batch = None if pc.batch_size == "fit" else spec.train.batch_size
    r = rank_configurations(
        spec,
        model,
        *run_hardware(spec, model),
        devices=pc.devices,
        cap=int(pc.memory_gib * GiB) if pc.memory_gib is not None else None,
        batch=batch,
        max_m=pc.max_m,
        top=pc.top,
    )
    shown, cap = r.shown, r.cap
    summary = (
        f"{spec.model.name} on hardware={r.hardware.name}, {pc.devices} device(s), cap "
        f"{cap / GiB:.2f} GiB per device, batch "
        f"{'fit' if batch is None else batch}, precision {spec.train.precision}; predicted by the "
        "simulator (replicas: each stage's gradient all-reduce after its last backward, a ring "
        "over the link)"
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
            report.search_line(r.stats),
        ]
    )
    report.write(Path(pc.out), shown, r.stats, cap, summary, cmd)
    return shown, text


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(usage(__doc__ or ""))
        return 0
    flags = [a for a in args if a.startswith("-")]
    if flags:
        print(
            f"gpipe-plan: error: {flags[0]} is not an option; allowed: -h/--help and key=value "
            "overrides",
            file=sys.stderr,
        )
        return 2
    try:
        _, text = plan(args)
    except UserError as err:
        print(f"gpipe-plan: error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
