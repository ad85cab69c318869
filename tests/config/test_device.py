"""The GPU path's harness side on a CPU (issue #22): device counts and launcher environments faked,
memory behind the device interface."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from gpipe_repro.config.compose import compose, sweep_world_size
from gpipe_repro.config.device import GPU_HEADROOM_BYTES, CudaDevice, DeviceMemory
from gpipe_repro.errors import UserError
from gpipe_repro.memory.activations import (
    StageActivation,
    peak_activation_bytes,
    step_temporary_bytes,
)
from gpipe_repro.memory.stages import StagePlan
from gpipe_repro.runner import run
from gpipe_repro.runner.guard import check_memory
from gpipe_repro.runplan.plan import plan_model, plan_run

GiB = 2**30
MLP = ["model.hidden=16", "model.depth=6", "logger=none", "train.progress=false"]


@pytest.fixture
def gpus(monkeypatch):
    """This host has ``n`` GPUs, as torch sees them."""

    def have(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    return have


def test_the_suite_runs_on_the_cpu_unless_asked_for_gpu_tests():
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "conftest.py"
    spec = importlib.util.spec_from_file_location("root_conftest", root)
    assert spec is not None and spec.loader is not None
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    asks_for_gpu = conftest.asks_for_gpu
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and not torch.cuda.is_available()
    assert asks_for_gpu("gpu") and asks_for_gpu("gpu and not slow")
    assert not asks_for_gpu("not gpu") and not asks_for_gpu("not slow")


def test_a_node_of_a_multi_node_run_counts_its_own_ranks(gpus, monkeypatch):
    gpus(4)
    eight = [*MLP, "pipeline.K=8", "device=cuda"]
    with pytest.raises(UserError, match="8 ranks, 8 of them on this host, but it has 4"):
        compose(eight)
    assert compose([*eight, "backend=auto"]).backend == "sim"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun --nnodes 2 --nproc-per-node 4
    assert compose(eight).device == "cuda"
    assert compose([*eight, "backend=auto"]).backend == "engine"


def test_device_auto_is_the_cpu_when_the_ranks_outnumber_the_gpus(gpus):
    gpus(1)
    assert compose([*MLP, "pipeline.K=1"]).device == "cuda"
    assert compose([*MLP, "pipeline.K=2"]).device == "cpu"


def test_backend_auto_is_decided_once_for_a_whole_sweep(gpus):
    assert sweep_world_size(["-m", "pipeline.K=1,2,4"], {}, 1, 1) == 4
    assert sweep_world_size([], {"pipeline.K": "2,4,8", "pipeline.M": "32"}, 2, 1) == 8
    assert sweep_world_size(["pipeline.replicas=2"], {"pipeline.K": "1,2"}, 1, 2) == 4
    gpus(2)
    alone = compose([*MLP, "backend=auto", "pipeline.K=1"])
    assert (alone.device, alone.backend) == ("cuda", "engine")
    from gpipe_repro.config.compose import _compose, _hydra, to_spec

    with _hydra():
        cfg = _compose([*MLP, "backend=auto", "pipeline.K=1"])
    in_sweep = to_spec(cfg, sweep_world=4)  # the sweep's K = 4 job cannot have a GPU per rank
    assert (in_sweep.device, in_sweep.backend) == ("cpu", "sim")


def test_a_gpus_budget_is_its_free_memory_less_a_headroom(monkeypatch):
    class Props:
        total_memory = 80 * GiB

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "a fake GPU")
    monkeypatch.setattr("gpipe_repro.config.device._smi_free_bytes", lambda i: 60 * GiB)
    mem = CudaDevice(0).memory()
    assert mem.total == 80 * GiB and mem.free == 60 * GiB and not mem.shared
    assert mem.headroom >= GPU_HEADROOM_BYTES
    assert mem.budget() == 60 * GiB - mem.headroom


def test_a_plan_beyond_a_gpus_budget_is_refused_in_one_line():
    spec = compose([*MLP, "model.hidden=512"], cuda_available=False)
    gpu = DeviceMemory("a GPU here (fake)", 1 * GiB, 2**20, 2**19)  # 1 MiB free, half kept
    plan = plan_run(spec, plan_model(spec), gpu)
    with pytest.raises(UserError) as err:
        check_memory(plan)
    assert "\n" not in str(err.value) and "on stage 0 but a GPU here (fake) has" in str(err.value)
    assert "0.0 GiB headroom" in str(err.value)  # what is held back is said


def test_the_plan_holds_sent_outputs_and_the_optimisers_temporaries():
    a = StageActivation(input=100, saved=1000, output=10)

    def sends(checkpoint: str, stage: int) -> int:
        """What the sent outputs add to the walk's peak (no receive posted ahead)."""
        walk = [
            peak_activation_bytes(b, "gpipe", checkpoint, 2, 4, stage, lookahead=1)
            for b in (replace(a, sent=10), a)
        ]
        return walk[0] - walk[1]

    assert sends("always", 0) == 4 * 10  # every send still held at the first recompute
    assert sends("except_last", 0) == 3 * 10  # the last output is kept
    assert sends("never", 0) == 0  # kept for backward anyway
    assert sends("always", 1) == 0  # the last stage sends none
    assert step_temporary_bytes(1000, "adam", 0.0, "cuda") == 4000
    assert step_temporary_bytes(1000, "rmsprop", 0.1, "cuda") == 8000
    assert step_temporary_bytes(1000, "adam", 0.0, "cpu") == 0  # one tensor at a time on a CPU
    st = StagePlan(state=100, activation=50, per_sample=10.0, fixed_activation=0, step=80)
    assert st.total == 180 and st.at(10) == 200  # the step's temporaries outlive no activation


def test_nccl_p2p_off_is_set_for_the_run_and_recorded(tmp_path):
    assert "NCCL_P2P_DISABLE" not in os.environ
    m = run(
        compose(
            [*MLP, "train.steps=2", "train.eval=false", "pipeline.nccl_p2p=false"],
            cuda_available=False,
        ),
        tmp_path,
    )
    assert m.status == "ok" and m.env.nccl == {"NCCL_P2P_DISABLE": "1"}
    assert "NCCL_P2P_DISABLE" not in os.environ  # only for the run


@pytest.mark.parametrize("experiment", ["table3_amoebanet", "table3_transformer"])
def test_table3_runs_without_nvlink(experiment):
    assert compose([f"experiment={experiment}"], cuda_available=False).pipeline.nccl_p2p is False


def test_a_gpus_free_memory_is_read_after_this_process_releases_its_cached_blocks(monkeypatch):
    """A K = 1 job runs in the process that launched it: its blocks stay cached, and nvidia-smi
    counts them as used, so the next job of a sweep would be planned against less than is free."""
    seen: list[str] = []

    class Props:
        total_memory = 80 * GiB

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Props())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "a fake GPU")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: seen.append("empty_cache"))
    monkeypatch.setattr(
        "gpipe_repro.config.device._smi_free_bytes", lambda i: seen.append("free") or 60 * GiB
    )
    assert CudaDevice(0).memory().free == 60 * GiB
    assert seen == ["empty_cache", "free"]


def test_nothing_is_released_in_a_process_that_never_used_cuda(monkeypatch):
    from gpipe_repro.config.device import release_cached

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: pytest.fail("would create a context"))
    release_cached("cuda")
    release_cached("cpu")


def test_an_in_process_job_releases_its_devices_cached_blocks(monkeypatch, tmp_path):
    released: list[str] = []
    monkeypatch.setattr("gpipe_repro.runner.local.release_cached", released.append)
    spec = compose([*MLP, "train.steps=2", "train.eval=false"], cuda_available=False)
    assert run(spec, tmp_path).status == "ok"
    assert released == ["cpu"]  # the run's device, once, after the job
