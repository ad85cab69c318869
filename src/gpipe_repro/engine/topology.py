"""Who is who in a run of K stages x D replicas, and the process groups they talk through.

Ranks are laid out replica-major: rank = replica * K + stage. The pipeline of replica d is ranks
d*K .. d*K+K-1; each of its links has two process groups of two ranks, one per direction
(activations forward, gradients back: ``comm.Channel``), so that on NCCL, where a group is one
communicator running its operations in order, neither direction waits behind the other (see
``fifo``). A ``ring`` adds the link from the last stage back to the first (and its gradients'
way), which schedules with several model chunks per rank need (``schedule``: model stage s runs on
rank s mod K, so chunk c of rank K-1 feeds chunk c+1 of rank 0); at K = 2 the ring's two links
join the same two ranks on groups of their own. The data-parallel group of stage k is ranks k, K+k, 2K+k, ... (gradient all-reduce,
BatchNorm statistics). Backend: gloo on CPU, nccl on CUDA.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .comm import Channel
from .errors import ArgumentError
from .fifo import Fifo, nccl_order_from_env

__all__ = ["Topology", "init_topology", "independent_pipelines", "single_process", "backend_for"]


@dataclass
class Topology:
    K: int
    replicas: int
    rank: int
    device: torch.device
    dp_group: dist.ProcessGroup | None = None
    # point-to-point channels to the neighbours (None where there is no neighbour)
    act_in: Channel | None = None  # activations from the previous stage
    act_out: Channel | None = None  # activations to the next stage
    grad_in: Channel | None = None  # gradients from the next stage
    grad_out: Channel | None = None  # gradients to the previous stage
    nccl_order: bool = False  # the channels run in NCCL's order on gloo (see ``fifo``)
    ring: bool = False  # a link from the last stage to the first (several chunks per rank)

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
        """The rank activations come from (round the ring for stage 0 of a ring)."""
        if self.stage > 0:
            return self.rank - 1
        return self.rank + self.K - 1 if self.ring and self.K > 1 else None

    @property
    def next_rank(self) -> int | None:
        """The rank activations go to (round the ring for the last stage of a ring)."""
        if self.stage < self.K - 1:
            return self.rank + 1
        return self.rank - self.K + 1 if self.ring and self.K > 1 else None

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
    K: int,
    replicas: int = 1,
    device: str = "cpu",
    timeout_s: float = 120.0,
    *,
    nccl_order: bool | None = None,
    ring: bool = False,
    _one_group: bool = False,
) -> Topology:
    """Join the process group described by the environment (RANK, WORLD_SIZE, MASTER_ADDR, ...).

    Works the same under ``gpipe_repro.engine.launch``, ``torchrun`` and SLURM (the caller exports
    the variables). ``world_size`` must equal K * replicas. ``nccl_order``: run the point-to-point
    channels in NCCL's order on gloo, a mode for tests (see ``fifo``); None reads
    ``GPIPE_NCCL_ORDER``; ignored on CUDA, where NCCL keeps that order itself. ``ring``: also link
    the last stage to the first (schedules with several chunks per rank). Every rank calls
    this in the same order (it creates process groups). ``_one_group`` puts every channel on the default group, as the engine did before it had
    channels: only the test that shows why that deadlocks under NCCL's order uses it.
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
    order = nccl_order_from_env() if nccl_order is None else nccl_order
    order = order and dev.type != "cuda"  # on CUDA, NCCL itself keeps that order
    topo = Topology(K=K, replicas=replicas, rank=rank, device=dev, nccl_order=order, ring=ring)
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
    _connect(topo, timeout_s, _one_group)
    return topo


def independent_pipelines(
    K: int, device: str = "cpu", timeout_s: float = 120.0, ring: bool = False
) -> Topology | None:
    """This rank's place among ``world // K`` independent pipelines of K stages each, in a process
    group that is already initialised: ranks d*K .. d*K+K-1 form pipeline d, with its own channels
    and no data-parallel group (each trains alone; the simulator's validation runs several at once).
    Every rank of the group calls this in the same order (it creates process groups); a rank left
    over (rank >= (world // K) * K) gets None."""
    world, rank = dist.get_world_size(), dist.get_rank()
    n = world // K
    if K < 1 or n < 1:
        raise ArgumentError("K", K, f"is invalid; allowed: 1 .. the world size {world}")
    dev = torch.device(device)
    order = nccl_order_from_env() and dev.type != "cuda"
    mine = rank < n * K
    topo = Topology(
        K=K, replicas=n, rank=rank if mine else 0, device=dev, nccl_order=order, ring=ring
    )
    _connect(topo, timeout_s, False)  # every pipeline's groups, on every rank
    if not mine:
        return None
    topo.replicas = 1  # no replica of it: no gradient all-reduce, no shared BatchNorm statistics
    return topo


def _connect(topo: Topology, timeout_s: float, one_group: bool) -> None:
    """Give ``topo`` its four channels: one group per link and direction (``one_group``: all on
    the default group, sharing one queue under NCCL's order, as one eager NCCL communicator)."""
    K = topo.K
    links = K if topo.ring and K > 1 else K - 1  # link k: stage k -> (k + 1) mod K
    groups: dict[tuple[int, str], dist.ProcessGroup | None] = {}
    for d in range(topo.replicas):
        for k in range(links):
            for direction in ("act", "grad"):
                ranks = [d * K + k, d * K + (k + 1) % K]
                groups[(d * K + k, direction)] = None if one_group else dist.new_group(ranks)
    fifos: dict[tuple[int, str], Fifo] = {}

    def channel(peer: int, key: tuple[int, str]) -> Channel:
        fifo = None
        if topo.nccl_order:
            shared = (-1, "default") if one_group else key
            dst = key[0] + 1 if key[0] % K < K - 1 else key[0] - K + 1
            name = "default group" if one_group else f"{key[1]} {key[0]}-{dst}"
            if shared not in fifos:
                fifos[shared] = Fifo(name, timeout_s)
            fifo = fifos[shared]
        return Channel(peer, groups[key], fifo)

    prev, nxt = topo.prev_rank, topo.next_rank
    if prev is not None:
        topo.act_in = channel(prev, (prev, "act"))
        topo.grad_out = channel(prev, (prev, "grad"))
    if nxt is not None:
        topo.act_out = channel(nxt, (topo.rank, "act"))
        topo.grad_in = channel(nxt, (topo.rank, "grad"))
