"""The harness on GPUs over nccl: both schedules, replicas, saves and resume, evaluation, the plan.

Skipped without CUDA; ``make gpu-check`` runs each in a process of its own with a two-minute limit
(an NCCL deadlock would otherwise wait for the 300 s watchdog). Each appends what it measured to
``$GPIPE_GPU_RECORD`` so the report has the numbers whether or not the assertion held.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch

from gpipe_repro.config.compose import compose
from gpipe_repro.runner import run

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
pytestmark = pytest.mark.gpu
BASE = [
    "model=tuplenet",  # AmoebaNet-shaped: (current, previous) pairs cross the boundaries
    "model.channels=32",
    "data=synthetic",
    "data.image_size=16",
    "pipeline.M=4",
    "train.batch_size=32",
    "train.steps=4",
    "train.warmup_steps=1",
    "train.progress=false",
    "logger=none",
    "device=cuda",
    "pipeline.timeout_s=60",  # an NCCL wait that hangs fails in a minute, not five
]


def record(test: str, **numbers: Any) -> None:
    path = os.environ.get("GPIPE_GPU_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, **numbers}, default=str) + "\n")


def needs(n: int) -> None:
    if GPUS < n:
        pytest.skip(f"needs {n} GPUs, this host has {GPUS}")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_both_schedules_over_nccl(tmp_path, schedule):
    needs(2)
    m = run(compose([*BASE, "pipeline.K=2", f"pipeline.schedule={schedule}"]), tmp_path)
    record(f"schedule_{schedule}", status=m.status, losses=m.losses, throughput=m.throughput)
    assert m.status == "ok", m.error
    assert [s.memory_source for s in m.stages] == ["cuda_allocator"] * 2


def test_replicas_over_nccl(tmp_path):
    needs(4)
    m = run(compose([*BASE, "pipeline.K=2", "pipeline.replicas=2"]), tmp_path)
    record("replicas", status=m.status, losses=m.losses, throughput=m.throughput)
    assert m.status == "ok", m.error
    assert m.world_size == 4


def test_a_save_resumes_bit_identically_over_nccl(tmp_path):
    needs(2)
    args = [*BASE, "pipeline.K=2", "train.steps=6", "train.save_every=3"]
    full = run(compose(args), tmp_path / "full")
    half = run(compose([*args[:-2], "train.steps=3", "train.save_every=3"]), tmp_path / "half")
    again = run(compose([*args, "train.resume=auto"]), tmp_path / "half")
    record("save_resume", full=full.losses, resumed=again.losses)
    assert full.status == half.status == again.status == "ok"
    assert again.losses == full.losses


def test_evaluation_over_nccl(tmp_path):
    needs(2)
    digits = [a for a in BASE if not a.startswith("data")] + ["data=digits", "train.eval=true"]
    m = run(compose([*digits, "pipeline.K=2"]), tmp_path)
    record("evaluation", status=m.status, eval=m.eval)
    assert m.status == "ok", m.error
    assert m.eval is not None and m.eval.samples > 0 and 0 <= m.eval.accuracy <= 1


def test_the_planned_memory_leaves_the_headroom_free(tmp_path):
    needs(1)
    m = run(compose([*BASE, "pipeline.K=1"]), tmp_path)
    peaks = [s.peak_memory_bytes for s in m.stages]
    record("plan_vs_peak", planned=m.plan.planned_stage_bytes, peak=peaks, plan=m.plan)
    assert m.status == "ok", m.error
    assert all(p <= m.plan.memory_budget_bytes for p in peaks)


# One GPU is a real case (issue #34): everything a K = 1 run can do on CUDA.
K1 = [a for a in BASE if not a.startswith("pipeline.M")] + ["pipeline.K=1", "pipeline.M=2"]


def test_hardware_measured_costs_k1_on_the_gpu(tmp_path):
    """The layers profiled on the GPU; the link only where K >= 2 needs it (two GPUs)."""
    needs(1)
    m = run(
        compose([*K1, "backend=sim", "hardware=measured", "sim.profile_max_micro_batch=8"]),
        tmp_path,
    )
    record("measured_k1", status=m.status, step_s=m.step_time_s, hardware=m.hardware)
    assert m.status == "ok", m.error
    assert m.hardware["device"] == torch.cuda.get_device_name(0)
    assert (m.hardware["link_latency_s"] is None) == (GPUS < 2)


def test_train_predict_and_balance_by_time_at_k1_on_the_gpu(tmp_path):
    needs(1)
    m = run(compose([*K1, "train.predict=true", "pipeline.balance_by=time"]), tmp_path)
    record(
        "predict_k1", status=m.status, measured_s=m.step_time_s, predicted_s=m.predicted_step_time_s
    )
    assert m.status == "ok", m.error
    assert m.predicted_step_time_s is not None and m.predicted_step_time_s > 0


def test_k2_on_fewer_gpus_is_refused_before_any_rank_starts():
    needs(1)
    if GPUS >= 2:
        pytest.skip("this host has a GPU per stage")
    from gpipe_repro.errors import UserError

    with pytest.raises(UserError, match="nccl cannot put two ranks on one device"):
        compose([*BASE, "pipeline.K=2"])
