"""This device, calibrated once: the ``measured`` hardware profile's link and engine overheads.

Per-layer costs depend on the model and are profiled per model (``distinct``, ``profile``). What does
not depend on the model is measured once per device and cached (``cache``):

- the link: latency and bandwidth of a real point-to-point transfer over the engine's backend
  (``link.measure_link``: gloo on CPU, nccl on CUDA), and the wake-up of a receiver blocked for a
  while (``Link.wake``) — only where two ranks can be paired: on a host with one GPU the link is an
  ``UnmeasuredLink`` (a K = 1 run never asks it; K >= 2 is refused in one line when costed), and the
  rest is measured on that GPU all the same;
- the engine's own cost per compute action (``overhead_s``) and per step (``step_overhead_s``): real
  K = 1 steps of a small reference model at several M, each minus its own compute spans, fitted by a
  line in the number of actions (``overhead.measure_overhead``, SIMULATION.md item 4). The reference
  is small (a few narrow linear layers, no BatchNorm) so that the residual is the engine's
  bookkeeping (splitting, event spans, autograd entry, the loss sum) rather than noise in large layer
  times; what depends on the model outside the spans — releasing a micro-batch's graph, the BatchNorm
  commit — is in each model's own profile (``stream``); the reference's stream profile gives a
  recompute's own cost beyond its forward (``recompute_overhead_s``: restoring the RNG state);
- what a receive costs the ranks of one run when they fill this host's cores
  (``shared_message_s``, ``sharing.measure_sharing``: real K = 2 steps of spinning
  stages against their simulation; on a CUDA device the host's cores are not the ranks' compute: 0);
- what a receiver that blocked pays once it computes again (``idle_penalty``, ``idle.measure_idle``:
  the reference model's forward and backward right after sleeping against back to back; on a CUDA
  device the host's cores are not the ranks' compute: none);
- what posting a send and a receive costs the calling thread (``Link.send_call_s``, ``recv_call_s``):
  gloo's ``isend`` returns once posted and moves the data on its own threads, after the receiver has
  posted its receive (the engine posts 4 actions ahead); nccl runs on a side stream. So a send does not
  occupy its sender (``sender_busy=False``) on either backend.

The ``measured`` hardware (``measured.MeasuredDevice``) joins a model's profile with these into the
``CostModel`` the simulator takes. Which of these terms moves with the host is why they are measured
on it rather than assumed: the per-action overhead is Python and autograd work (it follows the CPU's
speed), the wake-up is the host's idle states and hypervisor.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..costs import Link
from . import cache
from .idle import add_points, measure_idle
from .link import UnmeasuredLink, link_pairs, measure_link
from .overhead import measure_overhead
from .profile import profile_layers
from .sharing import measure_sharing

__all__ = ["DeviceModel", "device_model", "host_memory_bytes", "REFERENCE"]


@dataclass(frozen=True)
class _Reference:
    width: int = 64
    depth: int = 4
    N: int = 64
    Ms: tuple[int, ...] = (1, 2, 4, 8, 16)
    repeats: int = 5


REFERENCE = _Reference()


@dataclass(frozen=True)
class DeviceModel:
    """The model-independent part of the ``measured`` profile."""

    device: str  # the device's name (CPU model or CUDA device)
    link: Link
    overhead_s: float  # the engine's cost per forward or backward action of a micro-batch
    step_overhead_s: float  # the engine's cost per step and stage
    sender_busy: bool  # a send occupies the sending rank for its whole transfer (no: gloo, nccl)
    recompute_overhead_s: float = 0.0  # a recompute's cost beyond its forward (the RNG restore)
    # what each message sent or received costs a rank beyond posting it, when the ranks of one run
    # share this host's cores and keep them busy (``sharing``)
    shared_message_s: float = 0.0
    source: str = "measured"  # measured | cache
    # (seconds a rank was blocked, extra seconds its compute then takes): ``idle``
    idle_penalty: tuple[tuple[float, float], ...] = ()

    def ranks_link(self, cores: int) -> Link:
        """The link as the ranks of one run on this host's ``cores`` cores pay it: where they fill
        them, every receive also costs ``shared_message_s`` (``simulate``), and a receiver that blocked pays its compute's
        post-idle penalty beside its wake-up (an emulated rank, which sleeps, pays ``link``)."""
        return replace(
            self.link,
            shared_s=self.shared_message_s,
            cores=cores,
            wake=add_points(self.link.wake, self.idle_penalty),
        )

    @property
    def link_measured(self) -> bool:
        return not isinstance(self.link, UnmeasuredLink)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["link"] = asdict(self.link) if self.link_measured else None
        d["idle_penalty"] = [list(p) for p in self.idle_penalty]
        d.pop("source")
        return d


def host_cores() -> int:
    """The cores this process may run on: its affinity mask where the OS has one (a container
    limited to 2 CPUs of a large host counts 2), else the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity masks on this OS
        return os.cpu_count() or 1


def _reference_layers() -> list[nn.Module]:
    torch.manual_seed(0)
    w, d = REFERENCE.width, REFERENCE.depth
    layers: list[nn.Module] = [nn.Sequential(nn.Linear(w, w), nn.ReLU()) for _ in range(d)]
    return [*layers, nn.Linear(w, 10)]


def _reference_sample(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, REFERENCE.width, generator=g), torch.randint(0, 10, (n,), generator=g)


def _reference_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y)


def _reference_step(layers: list[nn.Module]) -> Callable[[], None]:
    """One forward and backward of the reference model at its batch: the post-idle workload."""
    ls = copy.deepcopy(layers)
    x, y = _reference_sample(REFERENCE.N)

    def step() -> None:
        h = x
        for layer in ls:
            h = layer(h)
        _reference_loss(h, y).backward()
        for p in (q for layer in ls for q in layer.parameters()):
            p.grad = None

    return step


def device_model(device: str = "cpu", *, use_cache: bool = True) -> DeviceModel:
    """The calibrated link and engine overheads of this device (measured once, then cached)."""
    dev = torch.device(device)
    key = {
        "device": cache.device_name(dev),
        "device_type": dev.type,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "reference": asdict(REFERENCE),
        # 4: overheads off the engine's spans; the link's wake-up; the recompute's cost. 5: measured
        # with the objects alive at set-up frozen out of Python's collector (``engine.hostmem``);
        # 6: what a message costs ranks sharing the host (``sharing``); 7: the post-idle penalty;
        # 8: that cost per message posted while the other ranks take every core, fitted through it;
        # 9: that cost per receive of ranks that fill the cores, fitted through it
        "format": 9,
        "link": "unmeasured" if (unpaired := link_pairs(dev.type)) else "measured",
    }
    if use_cache and (stored := cache.load("device", key)) is not None:
        try:
            if stored["link"] is None:
                stored_link: Link = UnmeasuredLink(0.0, float("inf"), reason=unpaired or "")
            else:
                fields = dict(stored["link"])
                fields["wake"] = tuple(tuple(p) for p in fields.get("wake", ()))
                stored_link = Link(**fields)
            return DeviceModel(
                stored["device"],
                stored_link,
                float(stored["overhead_s"]),
                float(stored["step_overhead_s"]),
                bool(stored["sender_busy"]),
                float(stored["recompute_overhead_s"]),
                float(stored["shared_message_s"]),
                "cache",
                tuple((float(b), float(p)) for b, p in stored["idle_penalty"]),
            )
        except (KeyError, TypeError, ValueError):
            pass
    link = (
        UnmeasuredLink(0.0, float("inf"), reason=unpaired)
        if unpaired
        else measure_link(device=dev.type, use_cache=use_cache).link
    )
    layers = _reference_layers()
    N, Ms = REFERENCE.N, REFERENCE.Ms
    prof = profile_layers(
        layers,
        _reference_sample,
        [N // m for m in Ms],
        device=dev,
        loss_fn=_reference_loss,
        repeats=REFERENCE.repeats,
        use_cache=use_cache,
        stream={N // m: m for m in Ms},
    )
    fit = measure_overhead(
        layers,
        _reference_sample,
        N,
        Ms,
        loss_fn=_reference_loss,
        device=dev,
        repeats=REFERENCE.repeats,
    )
    shared = (
        measure_sharing(link, fit.overhead_s, max(0.0, fit.fixed_s)).shared_message_s
        if dev.type == "cpu" and not unpaired
        else 0.0
    )
    idle = measure_idle(_reference_step(layers), use_cache=use_cache, key=asdict(REFERENCE))
    model = DeviceModel(
        cache.device_name(dev),
        link,
        fit.overhead_s,
        max(0.0, fit.fixed_s),
        False,
        prof.recompute_overhead_s,
        shared,
        idle_penalty=idle if dev.type == "cpu" else (),
    )
    if use_cache:
        cache.save("device", key, model.to_json())
    return model


def host_memory_bytes() -> int:
    """Physical memory of this machine (what ``hardware=measured`` on a CPU calls device memory)."""
    import os

    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
