"""Who is who in a run of K stages x D replicas, and the process groups they talk through.

Ranks are laid out replica-major: rank = replica * K + stage. The pipeline of replica d is ranks
d*K .. d*K+K-1 (point-to-point over the default group); the data-parallel group of stage k is ranks
k, K+k, 2K+k, ... (gradient all-reduce, BatchNorm statistics). Backend: gloo on CPU, nccl on CUDA.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .errors import ArgumentError

__all__ = ["Topology", "init_topology", "single_process", "backend_for"]


@dataclass
class Topology:
    K: int
    replicas: int
    rank: int
    device: torch.device
    dp_group: dist.ProcessGroup | None = None

    @property
    def world_size(self) -> int:
        return self.K * self.replicas

    @property
    def stage(self) -> int:
        return self.rank % self.K

    @property
    def replica(self) -> int:
        return self.rank // self.K

    @property
    def prev_rank(self) -> int | None:
        return self.rank - 1 if self.stage > 0 else None

    @property
    def next_rank(self) -> int | None:
        return self.rank + 1 if self.stage < self.K - 1 else None

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.K - 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def single_process(device: torch.device | str = "cpu") -> Topology:
    """K = 1, one replica: no process group, no communication."""
    return Topology(K=1, replicas=1, rank=0, device=torch.device(device))


def init_topology(
    K: int, replicas: int = 1, device: str = "cpu", timeout_s: float = 120.0
) -> Topology:
    """Join the process group described by the environment (RANK, WORLD_SIZE, MASTER_ADDR, ...).

    Works the same under ``gpipe_repro.engine.launch``, ``torchrun`` and SLURM (the caller exports
    the variables). ``world_size`` must equal K * replicas.
    """
    if K < 1:
        raise ArgumentError("K", K, "is invalid; allowed: an integer >= 1")
    if replicas < 1:
        raise ArgumentError("replicas", replicas, "is invalid; allowed: an integer >= 1")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world != K * replicas:
        raise ValueError(
            f"world size must equal K*replicas: {world} != {K}*{replicas} = {K * replicas}"
        )
    dev = torch.device(device)
    if dev.type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        dev = torch.device("cuda", local % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(dev)
    topo = Topology(K=K, replicas=replicas, rank=rank, device=dev)
    if world == 1:
        return topo
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=timeout_s)
        if dev.type == "cuda":  # binds the group to this rank's device (eager nccl init)
            dist.init_process_group(backend_for(dev), timeout=timeout, device_id=dev)
        else:
            dist.init_process_group(backend_for(dev), timeout=timeout)
    # Every rank creates every group, in the same order.
    for k in range(K):
        g = dist.new_group([d * K + k for d in range(replicas)]) if replicas > 1 else None
        if k == topo.stage:
            topo.dp_group = g
    return topo
