"""The device a run is validated, planned and timed against, behind one small interface.

Validation asks how many devices this host has for its ranks and how much memory they hold (total and
free); a rank asks to wait for queued work before reading a clock, to reset and read the allocator's
peak. ``CudaDevice`` answers with ``torch.cuda``; ``CpuDevice`` with the host's memory (all ranks of a
host share it) and no-ops — so every caller runs, and is tested, on a CPU, and a test can hand in a
device of its own (a fake GPU count, a small memory) without monkeypatching torch.

Memory left for the plan is the free memory less a headroom for what the plan does not hold: on a GPU
the CUDA context, NCCL's buffers, cuBLAS workspaces and the allocator's rounding; on a CPU each rank
process's own footprint (Python, torch, gloo buffers).

A K = 1 job runs in the process that launched it (a sweep's jobs one after another): its tensors are
freed at its end, but the CUDA allocator keeps their blocks cached, and ``nvidia-smi`` counts them as
used — the next job would be planned against less than is free. ``release_cached`` hands them back;
the launcher calls it after an in-process job, and ``CudaDevice.memory`` before it reads the free
memory.
"""

from __future__ import annotations

import gc
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

__all__ = [
    "Device",
    "CpuDevice",
    "CudaDevice",
    "DeviceMemory",
    "device_for",
    "local_ranks",
    "available_host_bytes",
    "cpu_name",
    "release_cached",
    "GPU_HEADROOM_BYTES",
    "GPU_HEADROOM_SHARE",
    "PROCESS_BYTES",
]

GiB = 2**30
# Per GPU, outside the plan: the CUDA context (~0.3-0.6 GiB), NCCL's channel buffers (a few MiB per
# peer and channel), cuBLAS workspaces, plus a share of the total for the caching allocator's
# rounding and fragmentation. An estimate stated before any GPU ran it: the first GPU session checks
# it against ``torch.cuda.max_memory_allocated`` (the gpu tests record both).
GPU_HEADROOM_BYTES = 1 * GiB
GPU_HEADROOM_SHARE = 0.05
PROCESS_BYTES = 400 * 2**20  # a CPU rank's own footprint besides the plan: Python, torch, gloo


@dataclass(frozen=True)
class DeviceMemory:
    """The memory a run's stages are planned against.

    ``shared``: every rank of the host draws on the same memory (the CPU's RAM), so the stages' plans
    add up; otherwise each stage has a device of its own (a GPU, or a simulated accelerator)."""

    where: str  # e.g. "a GPU here (NVIDIA H100)", "this host", "hardware=tpu_v3"
    total: int
    free: int
    headroom: int  # kept out of the budget (per device, or per rank process when shared)
    shared: bool = False

    def budget(self, ranks: int = 1) -> int:
        """Bytes the plan may use: per device, or for all ``ranks`` of a shared host together."""
        keep = self.headroom * (ranks if self.shared else 1)
        return max(0, min(self.total, self.free) - keep)


class Device(Protocol):
    """What the harness asks of the device its ranks run on."""

    type: str

    def count(self) -> int: ...

    def memory(self) -> DeviceMemory: ...

    def synchronize(self) -> None: ...

    def reset_peak(self) -> None: ...

    def peak_bytes(self) -> int | None: ...

    def name(self) -> str: ...


def available_host_bytes() -> int | None:
    """Memory this process's cgroup can still get: MemAvailable, capped by a cgroup limit."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        return None
    for limit_f, usage_f in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            raw = Path(limit_f).read_text().strip()
            if raw != "max" and int(raw) < 2**60:
                left = int(raw) - int(Path(usage_f).read_text().strip())
                avail = left if avail is None else min(avail, left)
            break
        except (OSError, ValueError):
            continue
    return avail


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


class CpuDevice:
    """This host's CPU: its RAM shared by every rank it runs, no allocator peak, nothing queued."""

    type = "cpu"

    def count(self) -> int:
        return 0

    def memory(self) -> DeviceMemory:
        total = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        free = available_host_bytes()
        return DeviceMemory(
            "this host", total, total if free is None else free, PROCESS_BYTES, shared=True
        )

    def synchronize(self) -> None:
        pass

    def reset_peak(self) -> None:
        pass

    def peak_bytes(self) -> int | None:
        return None

    def name(self) -> str:
        return cpu_name()


class CudaDevice:
    """One CUDA device (``index``) of this host, as torch sees it.

    ``memory`` asks ``nvidia-smi`` for the free memory where it can, so that the process that plans
    a run (which trains on no GPU itself when it starts ranks) does not create a CUDA context — half a
    GiB held on a GPU for the whole run; without it, ``torch.cuda.mem_get_info``."""

    type = "cuda"

    def __init__(self, index: int = 0) -> None:
        self.index = index

    def count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def memory(self) -> DeviceMemory:
        release_cached(self.type)  # this process's cached blocks are free for the plan too
        total = int(torch.cuda.get_device_properties(self.index).total_memory)
        free = _smi_free_bytes(self.index)
        if free is None:
            free = int(torch.cuda.mem_get_info(self.index)[0])
        headroom = GPU_HEADROOM_BYTES + int(GPU_HEADROOM_SHARE * total)
        return DeviceMemory(f"a GPU here ({self.name()})", total, free, headroom)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.index)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.index)

    def peak_bytes(self) -> int | None:
        return int(torch.cuda.max_memory_allocated(self.index))

    def name(self) -> str:
        return torch.cuda.get_device_name(self.index)


def release_cached(kind: str) -> None:
    """Give this process's cached CUDA blocks back to the driver (tensors still alive keep theirs);
    nothing on a CPU, nor in a process that never initialised CUDA (no context is created)."""
    if kind == "cuda" and torch.cuda.is_initialized():
        gc.collect()  # tensors held only by reference cycles (a finished job's graph)
        torch.cuda.empty_cache()


def _smi_free_bytes(index: int) -> int | None:
    """Free memory of visible CUDA device ``index`` from ``nvidia-smi`` (None when it cannot say)."""
    if shutil.which("nvidia-smi") is None:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",")] if visible else None
    target = ids[index] if ids is not None and index < len(ids) else str(index)
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,uuid,memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and target in (parts[0], parts[1]) and parts[2].isdigit():
            return int(parts[2]) * 2**20
    return None


def device_for(kind: str, index: int = 0) -> Device:
    """The device a run on ``kind`` ("cpu" or "cuda") uses; ``index``: this rank's local device."""
    return CudaDevice(index) if kind == "cuda" else CpuDevice()


def local_ranks(world_size: int) -> int:
    """Ranks of this run on this host: torchrun's and SLURM's ``LOCAL_WORLD_SIZE`` (the
    ``--nproc-per-node``), else the whole world (``gpipe-run`` starts every rank here)."""
    value = os.environ.get("LOCAL_WORLD_SIZE")
    return int(value) if value and value.isdigit() else world_size
