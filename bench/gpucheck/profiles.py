"""The per-layer costs of the paper's Table 2 (then Table 3) models measured on this GPU, kept as files.

Each experiment's model is planned on the meta device and its distinct layers profiled on the GPU as
``hardware=measured`` does (``sim.measured``: every layer as a stage runs it, at the micro-batches
the experiment's ``sim.profile_max_micro_batch`` allows, in streams of ``sim.profile_stream``), with
the engine's overheads calibrated on the GPU; one GPU has no link to measure, so the file borrows the
link figures of its device's published profile (``sim.measured.committed``). Written to
``<out>/profiles/<experiment>.json``: committed from ``reports/gpu/``, they give Tables 2 and 3 a
series simulated from these costs (``studies.gpu_series``).
"""

from __future__ import annotations

from dataclasses import replace

from .common import Ctx, StepOutput, compose_for, within

__all__ = ["EXPERIMENTS", "run"]

# Table 2's models first (the series the issue asks for), then Table 3's if the budget allows
EXPERIMENTS = ("table2_transformer", "table2_amoebanet", "table3_transformer", "table3_amoebanet")
DRY = {
    "table2_transformer": (
        "model=transformer_lm", "model.L=2", "model.d=32", "model.H=64", "model.A=2",
        "data=synthetic", "data.kind=tokens", "data.vocab=64", "data.seq_len=16",
        "train.batch_size=8", "sim.profile_max_micro_batch=2", "experiment_name=table2_transformer",
    ),
}  # fmt: skip


def _calibration(ctx: Ctx):  # noqa: ANN202 - sim.measured.DeviceModel
    """The GPU's engine overheads, measured (cached); the dry run's are fixed numbers (calibrating a
    CPU takes longer than the whole dry run should)."""
    from gpipe_repro.sim.costs import Link
    from gpipe_repro.sim.measured import device_model
    from gpipe_repro.sim.measured.device import DeviceModel

    if not ctx.dry:
        return device_model("cuda")
    return DeviceModel("dry run (not measured)", Link(1e-5, 1e9), 1e-5, 1e-4, False)


def run(ctx: Ctx) -> StepOutput:
    import torch

    from gpipe_repro.runplan.costing import measured_sizes, model_key, workload
    from gpipe_repro.runplan.plan import plan_model
    from gpipe_repro.sim.measured import MeasuredDevice, cache
    from gpipe_repro.sim.measured.committed import (
        CommittedProfile,
        borrowed_link,
        measured_now,
        save,
    )

    out = StepOutput()
    cal = _calibration(ctx)
    names = list(DRY) if ctx.dry else list(EXPERIMENTS)

    def one(exp: str) -> None:
        overrides = list(DRY[exp]) if ctx.dry else [f"experiment={exp}"]
        spec = compose_for(
            ctx, [*overrides, "backend=sim", "hardware=measured", f"device={ctx.device}"]
        )
        plan = plan_model(spec)
        torch.set_num_threads(spec.train.threads)
        hw = MeasuredDevice(ctx.device, spec.sim.profile_repeats, calibration=cal)
        sizes = measured_sizes(spec, plan)
        costs = hw.cost_model(
            workload(spec, plan), sizes, spec.sim.profile_stream or spec.pipeline.M
        )
        device = cache.device_name(ctx.device)
        link, link_from = borrowed_link(device)
        committed = CommittedProfile(
            experiment=exp,
            model_key=model_key(spec, plan),
            device=device,
            memory_bytes=hw.memory_bytes,
            profile=replace(costs.profile, key={}),
            overhead_s=costs.overhead_s,
            step_overhead_s=costs.step_overhead_s,
            link=link,
            link_from=link_from,
            measured=measured_now("make gpu-check (bench/gpucheck/profiles.py)", dry_run=ctx.dry),
        )
        path = save(committed, ctx.out / "profiles" / f"{exp}.json")
        layers = costs.layer_costs(sizes[-1])
        out.rows.append(
            {
                "experiment": exp,
                "model": spec.model.name,
                "layers": len(plan.layers),
                "distinct_layers": committed.profile.distinct,
                "micro_batches": "/".join(map(str, sizes)),
                "largest_micro_batch": sizes[-1],
                "fwd_bwd_s_at_largest": sum(c.forward_s + c.backward_s for c in layers),
                "file": str(path.relative_to(ctx.out)),
            }
        )

    within(ctx, out, names, 30.0, one)
    return out
