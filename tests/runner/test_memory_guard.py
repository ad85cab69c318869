"""The memory guard in this process, with the capacities patched: a plan that fits to the byte runs,
one byte less is refused in one line before any rank starts (host RAM shared by the ranks, and one
GPU per stage, the one with the least free memory), and ``train.memory_check=false`` runs anyway."""

from __future__ import annotations

import json

import pytest
import torch

from gpipe_repro.config.compose import compose
from gpipe_repro.config.device import GPU_HEADROOM_BYTES, GPU_HEADROOM_SHARE, PROCESS_BYTES
from gpipe_repro.errors import UserError
from gpipe_repro.runner import plan, run
from gpipe_repro.runner.guard import check_memory
from gpipe_repro.runplan.plan import RunPlan, engine_memory, plan_model, plan_run

GiB = 2**30
SMALL = [
    "model.hidden=256",
    "model.depth=3",
    "train.steps=2",
    "train.warmup_steps=1",
    "logger=none",
    "train.progress=false",
    "train.eval=false",
]


def _host_free(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr("gpipe_repro.config.device.available_host_bytes", lambda: free)


def _host_need(spec) -> int:
    """What the host must have free for ``spec``: its stages' plans and each rank's own headroom."""
    planned = plan(spec, plan_model(spec)).planned_bytes()
    return sum(planned) * spec.pipeline.replicas + PROCESS_BYTES * spec.world_size


def test_the_host_check_passes_at_its_exact_need_and_refuses_one_byte_less(monkeypatch):
    spec = compose([*SMALL, "pipeline.K=2", "pipeline.M=2"], cuda_available=False)
    need = _host_need(spec)
    _host_free(monkeypatch, need)
    assert sum(check_memory(plan(spec, plan_model(spec)))) == need - 2 * PROCESS_BYTES
    _host_free(monkeypatch, need - 1)
    with pytest.raises(UserError, match=r"the plan needs .* GiB on this host \(2 rank\(s\)"):
        check_memory(plan(spec, plan_model(spec)))


def test_a_run_that_cannot_fit_the_host_is_refused_before_any_rank_starts(tmp_path, monkeypatch):
    spec = compose([*SMALL, "pipeline.K=2", "pipeline.M=2"], cuda_available=False)
    _host_free(monkeypatch, _host_need(spec) - 1)
    m = run(spec, tmp_path)
    assert m.status == "failed" and "\n" not in m.error, m.error
    assert m.error.startswith("the plan needs") and "train.memory_check=false" in m.error
    assert m.losses == [] and not (tmp_path / "progress.jsonl").exists()  # nothing ran
    assert json.loads((tmp_path / "metrics.json").read_text())["error"] == m.error


def test_memory_check_false_runs_what_the_guard_would_refuse(tmp_path, monkeypatch):
    args = [*SMALL, "train.memory_check=false"]
    spec = compose(args, cuda_available=False)
    _host_free(monkeypatch, _host_need(spec) - 1)
    m = run(spec, tmp_path)
    assert m.status == "ok" and len(m.losses) == 2, m.error


def _gpus(monkeypatch: pytest.MonkeyPatch, free: list[int], total: int = 8 * GiB) -> None:
    class Props:
        total_memory = total

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(free))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"fake GPU {i}")
    monkeypatch.setattr("gpipe_repro.config.device._smi_free_bytes", lambda i: free[i])


def test_the_gpu_check_holds_the_worst_stage_against_the_fullest_gpu(monkeypatch):
    # The GPU memory the harness picks (``runplan.plan.engine_memory``), with the stages planned on this CPU's
    # kernels (planning with CUDA's needs a real device).
    args = [*SMALL, "pipeline.K=2", "pipeline.M=2"]
    gpu_spec = compose([*args, "device=cuda"], cuda_available=True)
    spec = compose(args, cuda_available=False)
    model = plan_model(spec)
    headroom = GPU_HEADROOM_BYTES + int(GPU_HEADROOM_SHARE * 8 * GiB)
    worst = max(plan(spec, model).planned_bytes())
    stage = plan(spec, model).planned_bytes().index(worst)

    def gpu_plan(free: list[int]) -> RunPlan:
        _gpus(monkeypatch, free)
        return plan_run(spec, model, engine_memory(gpu_spec))

    p = gpu_plan([8 * GiB, headroom + worst])  # GPU 1 has just enough
    assert p.memory.where == "a GPU here (fake GPU 1)" and not p.memory.shared
    assert max(check_memory(p)) == worst
    with pytest.raises(UserError) as err:
        check_memory(gpu_plan([8 * GiB, headroom + worst - 1]))
    assert f"on stage {stage} but a GPU here (fake GPU 1) has" in str(err.value)
    assert "\n" not in str(err.value) and "train.memory_check=false" in str(err.value)
