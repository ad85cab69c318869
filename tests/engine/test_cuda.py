"""The CUDA path (nccl, allocator memory). Skipped without a GPU; CI has none."""

import pytest
import torch

from gpipe_repro.config.compose import compose
from gpipe_repro.runner import run


def spec(K: int):
    return compose(["model=mlp", "model.hidden=256", "model.depth=4", "data=mnist", f"pipeline.K={K}", "pipeline.M=4",
                    "train.batch_size=64", "train.steps=4", "train.warmup_steps=1", "train.progress=false",
                    "logger=none", "device=cuda"])


@pytest.mark.gpu
def test_one_stage_on_cuda_reports_allocator_peak(tmp_path):
    m = run(spec(1), tmp_path)
    assert m.status == "ok", m.error
    st = m.stages[0]
    assert st.memory_source == "cuda_allocator" and st.peak_memory_bytes >= st.param_bytes


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (one per stage)")
def test_two_stages_over_nccl(tmp_path):
    m = run(spec(2), tmp_path)
    assert m.status == "ok", m.error
    assert len(m.stages) == 2
