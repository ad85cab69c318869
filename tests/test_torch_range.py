"""The torch APIs the project calls whose signatures moved in recent releases, checked on the torch
installed: across the supported range (``gpipe_repro.supported``: the floor to CI's pin) every one must
be there as called. CI runs this on the pinned torch; under another torch (a GPU host's, a scratch venv
with the floor's release) run it, and the CPU suite, with that interpreter. Most of these are reached
only on CUDA (nccl, CUDA events, the allocator), which the CPU suite never runs."""

from __future__ import annotations

import dataclasses
import inspect

import torch
import torch.distributed as dist


def _params(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def test_the_elastic_launcher_takes_what_engine_launch_passes():
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    fields = {f.name for f in dataclasses.fields(LaunchConfig)}
    assert {"logs_specs", "signals_to_handle", "start_method", "monitor_interval"} <= fields
    assert "log_dir" in _params(DefaultLogsSpecs)


def test_the_process_groups_take_a_device_and_a_backend_per_group():
    assert "device_id" in _params(dist.init_process_group)  # engine.topology on CUDA
    assert {"backend", "timeout"} <= _params(dist.new_group)  # rank.run's gloo side group


def test_cuda_events_the_allocator_and_tf32_switches_are_there():
    assert "enable_timing" in _params(torch.cuda.Event)  # engine.device.CudaClock
    for name in ("mem_get_info", "max_memory_allocated", "memory_allocated", "memory_stats",
                 "reset_peak_memory_stats", "empty_cache", "is_initialized", "max_memory_reserved"):  # fmt: skip
        assert callable(getattr(torch.cuda, name)), name
    assert torch.amp.is_autocast_available("cpu")  # engine.precision
    assert "mode" in _params(torch.autograd.graph.register_multi_grad_hook)  # sim.measured.stream
    # bench/gpucheck/tf32.py: the fp32-precision switches (not the older allow_tf32 flags)
    assert torch.backends.cuda.matmul.fp32_precision in ("none", "ieee", "tf32")
    assert torch.backends.cudnn.conv.fp32_precision in ("none", "ieee", "tf32")
