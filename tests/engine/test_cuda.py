"""The CUDA path (nccl, allocator memory, bf16). Skipped without a GPU; `make gpu-check` runs them.

Each test also appends the numbers it measured to ``$GPIPE_GPU_RECORD`` (one JSON object per line)
when that is set, so ``make gpu-check`` can report them whether the assertion held or not.
"""

from __future__ import annotations

import gc
import json
import os
from typing import Any

import _precision_workers as pw
import pytest
import torch

from gpipe_repro.config.compose import compose
from gpipe_repro.engine import PRECISIONS, launch
from gpipe_repro.runner import plan as plan_run
from gpipe_repro.runner import run
from gpipe_repro.runner.guard import check_memory
from gpipe_repro.runplan.plan import plan_model

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
# The planner predicts state + peak activations; the allocator also holds what the planner does not
# model: backward's and the optimiser's temporaries, cuBLAS workspaces, the rounding of blocks.
# Sized so those are a few percent of the peak; the bound is stated before any GPU has run it.
PEAK_REL = 0.15


def record(test: str, **numbers: Any) -> None:
    path = os.environ.get("GPIPE_GPU_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, **numbers}, default=str) + "\n")


def spec(K: int, extra: tuple[str, ...] = ()):
    return compose(
        [
            "model=mlp",
            "model.hidden=256",
            "model.depth=4",
            "data=mnist",
            f"pipeline.K={K}",
            "pipeline.M=4",
            "train.batch_size=64",
            "train.steps=4",
            "train.warmup_steps=1",
            "train.progress=false",
            "logger=none",
            "device=cuda",
            *extra,
        ]
    )


@pytest.mark.gpu
def test_one_stage_on_cuda_reports_allocator_peak(tmp_path):
    m = run(spec(1), tmp_path)
    assert m.status == "ok", m.error
    st = m.stages[0]
    record(
        "one_stage_allocator_peak",
        device=m.env.device_names,
        peak_bytes=st.peak_memory_bytes,
        param_bytes=st.param_bytes,
        throughput=m.throughput,
    )
    assert st.memory_source == "cuda_allocator" and st.peak_memory_bytes >= st.param_bytes


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason="needs two GPUs (one per stage)")
def test_two_stages_over_nccl(tmp_path):
    m = run(spec(2), tmp_path)
    assert m.status == "ok", m.error
    record(
        "two_stages_over_nccl", losses=m.losses, throughput=m.throughput, bubble=m.bubble_fraction
    )
    assert len(m.stages) == 2


def lm_spec(K: int, precision: str) -> Any:
    """A Transformer LM sized so activations and state are GiBs: fixed overheads stay small."""
    return compose(
        [
            "model=transformer_lm",
            "model.L=4",
            "model.d=1024",
            "model.H=4096",
            "model.A=16",
            "data=synthetic",
            "data.kind=tokens",
            "data.vocab=2048",
            "data.seq_len=512",
            f"pipeline.K={K}",
            "pipeline.M=4",
            "pipeline.checkpoint=except_last",
            f"pipeline.balance=[{','.join(['6'] if K == 1 else ['3', '3'])}]",
            "train.batch_size=32",
            "train.steps=3",
            "train.warmup_steps=1",
            "train.progress=false",
            "train.eval=false",
            f"train.precision={precision}",
            "optim=sgd",
            "logger=none",
            "device=cuda",
        ]
    )


@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("K", [1, 2])
def test_planner_predicts_each_stages_allocator_peak(tmp_path, K, precision):
    """The plan (fake CUDA tensors through the engine's stage code, CUDA's autocast policy) against
    ``torch.cuda.max_memory_allocated`` of each stage's rank."""
    if K > GPUS:
        pytest.skip(f"needs {K} GPUs")
    s = lm_spec(K, precision)
    planned = check_memory(plan_run(s, plan_model(s)))
    gc.collect()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated() if K == 1 else 0  # K = 1 runs in this process
    torch.cuda.reset_peak_memory_stats()
    m = run(s, tmp_path)
    assert m.status == "ok", m.error
    peaks = [st.peak_memory_bytes - base for st in m.stages]
    record(
        "planner_vs_allocator",
        K=K,
        precision=precision,
        planned_bytes=planned,
        allocator_peak_bytes=peaks,
        ratio=[p / q for p, q in zip(peaks, planned)],
        activation_bytes_accounted=[st.activation_bytes for st in m.stages],
    )
    assert [st.memory_source for st in m.stages] == ["cuda_allocator"] * K
    for k, (peak, plan) in enumerate(zip(peaks, planned)):
        assert peak == pytest.approx(plan, rel=PEAK_REL), (k, peak, plan)


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason="needs two GPUs: K = 1 against K >= 2 over nccl")
@pytest.mark.parametrize("precision", PRECISIONS)
def test_losses_are_identical_across_K_over_nccl(precision):
    """The CPU test's exactness on GPUs: K = 1, 2 (and 4 with four GPUs), deterministic kernels."""
    runs = [dict(model=m, precision=precision, steps=3, device="cuda") for m in pw.MODELS]
    ks = [K for K in (1, 2, 4) if K <= GPUS]
    losses = {}
    for K in ks:
        per_rank = launch(pw.grid, K, (K, runs), threads=1)
        losses[K] = [
            next(r["losses"] for r in (rank[i] for rank in per_rank) if r["stage"] == K - 1)
            for i in range(len(runs))
        ]
        sent = {d for rank in per_rank for r in rank for d, _ in r["sent"] if d != "torch.int64"}
        if K > 1:
            assert sent == {"torch.bfloat16" if precision == "bf16" else "torch.float32"}
    record("losses_across_K_over_nccl", precision=precision, models=list(pw.MODELS), losses=losses)
    for K in ks[1:]:
        assert losses[K] == losses[1], (K, losses)
