"""A run's plan, decided once (issue #17 item 3): the two bugs its copies drifted into, and the plan's
own promises."""

from __future__ import annotations

from gpipe_repro.config.compose import compose
from gpipe_repro.config.device import DeviceMemory
from gpipe_repro.runplan.plan import plan_model, plan_run

MiB = 2**20
TRANSLATION = [
    "model=transformer_mt",
    "data=synthetic",
    "data.kind=pairs",
    "data.seq_len=16",
    "train.batch_size=8",
    "logger=none",
]
LM = [
    "model=transformer_lm",
    "data=synthetic",
    "data.kind=tokens",
    "data.seq_len=32",
    "train.batch_size=8",
    "logger=none",
]


def _fit(overrides: list[str], budget: int) -> int:
    spec = compose([*overrides, "train.batch_mode=fit"], cuda_available=False)
    plan = plan_run(spec, plan_model(spec), DeviceMemory("a test device", budget, budget, 0))
    return plan.spec.train.batch_size


def test_fit_plans_a_translation_model_with_its_token_loss():
    """``batch_mode=fit`` planned transformer_mt's (batch, sequence, vocabulary) output with a
    classification loss, which cannot even be evaluated on it."""
    assert _fit(TRANSLATION, 256 * MiB) > 8


def test_fit_sizes_a_bf16_batch_with_bf16_activations():
    """bf16 keeps activations in half the bytes, so the batch that fits the same memory is larger;
    the fit used to plan every precision as fp32."""
    fp32 = _fit(LM, 256 * MiB)
    bf16 = _fit([*LM, "train.precision=bf16"], 256 * MiB)
    assert bf16 > 1.3 * fp32, (fp32, bf16)
