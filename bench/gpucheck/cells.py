"""The paper's models on one GPU, K = 1: the memory planner against the allocator, the CUDA-event busy
time against wall time, and the measured step against the roofline profiles (h100, h200).

Cells: AmoebaNet-D(18, 256) at batch 128 (Table 2's, 224 x 224) with M = 1, 4, 32 and remat never or
always, where the plan fits the GPU (the planner decides, as ``gpipe-run`` would: a cell that does not
fit is listed as skipped with the planner's line); a Transformer-L (Table 2's layer: d 2048, H 8192,
A 32, vocabulary 32k, 1,024 tokens; 12 layers so that it fits one GPU) in fp32 and bf16.

Per cell:
- memory: the plan's stage bytes (``runner.guard.check_memory``) against the allocator's peak over
  the timed steps (``torch.cuda.max_memory_allocated``, ``metrics.json``'s ``peak_memory_bytes``),
  and what neither holds, named: the CUDA context and handles (device memory in use less the
  allocator's reservation, measured once at start-up), cuBLAS's workspace (taken from the allocator,
  so inside the peak; measured once), and the allocator's fragmentation at the cell's peak (reserved
  less allocated; its inactive split blocks);
- time: the median step (wall clock, after a synchronisation: the engine's step time) against the
  median busy time per step from CUDA events on the stage's stream (``busy_s``): their ratio is the
  share of a step the GPU computes;
- the same configuration simulated on ``hardware=h100`` and ``hardware=h200`` (the roofline on
  counted FLOPs and bytes) at the run's precision (fp32: the profiles' fp32 peak, though cuDNN runs
  fp32 convolutions in TF32 by default; bf16: their half peak): its step time over the measured one.
"""

from __future__ import annotations

from typing import Any

from .common import (
    Ctx,
    StepOutput,
    compose_for,
    cublas_workspace_bytes,
    cuda_context_bytes,
    cuda_memory,
    gib,
    run_spec,
    within,
)

__all__ = ["cells", "run"]

AMOEBA = ("experiment=table2_amoebanet",)
TRANSFORMER = ("experiment=table2_transformer", "model.L=12", "train.batch_size=8")
DRY_AMOEBA = (
    "model=amoebanet_d", "model.L=3", "model.D=8", "data=synthetic", "data.kind=image",
    "data.image_size=32", "data.classes=10", "train.batch_size=8",
)  # fmt: skip
DRY_TRANSFORMER = (
    "model=transformer_lm", "model.L=2", "model.d=32", "model.H=64", "model.A=2", "data=synthetic",
    "data.kind=tokens", "data.vocab=64", "data.seq_len=16", "train.batch_size=4",
)  # fmt: skip
PROFILES = ("h100", "h200")


def cells(dry: bool) -> list[tuple[str, list[str]]]:
    """(name, overrides) of every cell, in the order they run (the budget may stop the list); the
    dry run: one of each model."""
    amoeba, lm = (DRY_AMOEBA, DRY_TRANSFORMER) if dry else (AMOEBA, TRANSFORMER)
    out = [
        (f"Transformer-L {p}", [*lm, "pipeline.M=2", "pipeline.checkpoint=except_last", f"train.precision={p}"])
        for p in (("fp32",) if dry else ("fp32", "bf16"))
    ]  # fmt: skip
    order = [
        (4, "always"),
        (1, "never"),
        (1, "always"),
        (4, "never"),
        (32, "always"),
        (32, "never"),
    ]
    out += [
        (f"AmoebaNet-D M={M} remat {c}", [*amoeba, f"pipeline.M={M}", f"pipeline.checkpoint={c}"])
        for M, c in order[: 1 if dry else None]
    ]
    return out


COMMON = (
    "pipeline.K=1",
    "backend=engine",
    "train.steps=3",
    "train.warmup_steps=1",
    "train.eval=false",
)


def _precision(overrides: list[str]) -> str:
    """The roofline's precision for a run: half for bf16, else fp32 (the profile's own is half)."""
    return "half" if "train.precision=bf16" in overrides else "fp32"


def _simulated(ctx: Ctx, overrides: list[str], hardware: str) -> float | None:
    from gpipe_repro.runner import run

    sim = [o for o in COMMON if not o.startswith("backend=")]
    at = f"hardware.precision={_precision(overrides)}"
    spec = compose_for(
        ctx, [*overrides, *sim, "backend=sim", f"hardware={hardware}", at, "device=cpu"]
    )
    m = run(spec, ctx.out / "runs" / f"sim-{hardware}-{abs(hash(tuple(overrides)))}")
    return m.step_time_s if m.status == "ok" else None


def run(ctx: Ctx) -> StepOutput:
    import torch

    out = StepOutput()
    base: dict[str, Any] = {}
    if not ctx.dry:
        base["context_gib"] = gib(cuda_context_bytes())
        base["cublas_workspace_gib"] = gib(cublas_workspace_bytes())
    todo = dict(cells(ctx.dry))

    def one(name: str) -> None:
        from gpipe_repro.runner import plan as plan_run
        from gpipe_repro.runner.guard import check_memory
        from gpipe_repro.runplan.plan import plan_model

        overrides = [*todo[name], *COMMON, f"device={ctx.device}"]
        spec = compose_for(ctx, overrides)
        planned = check_memory(plan_run(spec, plan_model(spec)))  # one line when it cannot fit
        if not ctx.dry:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        m = run_spec(ctx, overrides, ctx.out / "runs" / name.replace(" ", "_"))
        if m.status != "ok":
            raise RuntimeError(m.error)
        st = m.stages[0]
        mem = cuda_memory() if not ctx.dry else {}
        peak = st.peak_memory_bytes
        row: dict[str, Any] = {
            "cell": name,
            "planned_gib": gib(planned[0]),
            "peak_gib": gib(peak),
            "peak_source": st.memory_source,
            "plan_error": (peak / planned[0] - 1) if peak and planned[0] else None,
            "fragmentation_gib": gib(mem["peak_reserved"] - mem["peak_allocated"]) if mem else None,
            "inactive_split_gib": gib(mem.get("peak_inactive_split")) if mem else None,
            "step_s": m.step_time_s,
            "busy_s": st.busy_s,
            "busy_share": st.busy_s / m.step_time_s if m.step_time_s else None,
        }
        row["sim_precision"] = _precision(todo[name])
        for hw in PROFILES:
            sim = _simulated(ctx, todo[name], hw)
            row[f"{hw}_sim_s"] = sim
            row[f"{hw}_sim_over_measured"] = sim / m.step_time_s if sim and m.step_time_s else None
        out.rows.append(row)
        if not ctx.dry:
            del m
            torch.cuda.empty_cache()

    within(ctx, out, list(todo), 30.0, one)
    if base:
        out.notes.append(
            f"Outside the plan on this GPU: the CUDA context and handles hold {base['context_gib']} "
            f"GiB (device memory in use less the allocator's reservation, at start-up); cuBLAS's "
            f"workspace takes {base['cublas_workspace_gib']} GiB from the allocator (inside the peak "
            "the plan is compared with); fragmentation per cell: the allocator's reservation less "
            "its allocation at the peak."
        )
    if ctx.dry:
        out.notes.append(
            "Dry run on the CPU: the peak is the engine's accounted memory, not an allocator's."
        )
    return out
