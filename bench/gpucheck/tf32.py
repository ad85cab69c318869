"""CUDA losses against the CPU's for a small K = 1 model, TF32 off and on: how far, and how much of it
is TF32.

The same run (same seed, data and steps) three times: on the CPU, on the GPU with every fp32 matmul
and convolution in full fp32 (``fp32_precision = "ieee"``), and on the GPU with both in TF32 (10-bit
mantissa products; cuDNN's convolutions default to it, cuBLAS's matmuls do not). Per run, the largest
relative difference of a step's loss from the CPU's: the "ieee" run's is what kernel order and
algorithms alone move; the TF32 run's beyond it is TF32's share.
"""

from __future__ import annotations

from collections.abc import Sequence

from .common import Ctx, StepOutput, run_spec, within

__all__ = ["MODEL", "run"]

# a small conv net (convolutions through cuDNN, a linear head through cuBLAS) on synthetic images
MODEL = (
    "model=tuplenet",
    "model.channels=32",
    "data=synthetic",
    "data.image_size=16",
    "pipeline.K=1",
    "pipeline.M=4",
    "train.batch_size=64",
    "train.eval=false",
    "seed=0",
)
STEPS = {"gpu": 20, "dry": 3}


def _set_precision(mode: str) -> None:
    import torch

    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.conv.fp32_precision = mode


def _rel(a: Sequence[float], b: Sequence[float]) -> float:
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def run(ctx: Ctx) -> StepOutput:
    out = StepOutput()
    steps = STEPS["dry" if ctx.dry else "gpu"]
    base = [*MODEL, f"train.steps={steps}", "train.warmup_steps=1"]
    losses: dict[str, list[float]] = {}

    def one(case: str) -> None:
        device = "cpu" if case == "cpu" or ctx.dry else "cuda"
        if device == "cuda":
            _set_precision(case)
        m = run_spec(ctx, [*base, f"device={device}"], ctx.out / "runs" / f"tf32-{case}")
        if m.status != "ok":
            raise RuntimeError(m.error)
        losses[case] = [float(x) for x in m.losses]

    within(ctx, out, ["cpu", "ieee", "tf32"], 5.0, one)
    if "cpu" not in losses:
        return out
    for case in ("ieee", "tf32"):
        if case in losses:
            out.rows.append(
                {
                    "run": f"CUDA, fp32_precision={case}" if not ctx.dry else f"dry run ({case})",
                    "steps": steps,
                    "max_rel_loss_diff_vs_cpu": _rel(losses[case], losses["cpu"]),
                    "last_loss": losses[case][-1],
                    "cpu_last_loss": losses["cpu"][-1],
                }
            )
    if "ieee" in losses and "tf32" in losses:
        ieee, tf32 = (_rel(losses[c], losses["cpu"]) for c in ("ieee", "tf32"))
        out.notes.append(
            f"Over {steps} steps the GPU's losses differ from the CPU's by at most {ieee:.2e} "
            f"(relative) with fp32 kept exact and {tf32:.2e} with TF32 on: TF32's share of the "
            f"difference is {max(0.0, tf32 - ieee):.2e}."
        )
    return out
