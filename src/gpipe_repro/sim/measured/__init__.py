"""This device, measured: the ``measured`` hardware profile, with the same interface as a published one.

Its costs are timed here: each distinct layer of a run's model profiled as a stage runs it (``stream``,
``distinct``, ``profile``), the link, the wake-up of a blocked receiver and the engine's own overheads
calibrated once per device (``device``, ``link``, ``overhead``), all cached (``cache``); the speed probe
(``speed``) puts measurements taken at different moments on one scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ...engine.pipeline import DEFAULT_LOOKAHEAD
from ..costs import CostModel
from ..interface import Trust, Workload
from .costs import MeasuredCosts
from .device import DeviceModel, device_model, host_cores, host_memory_bytes
from .distinct import profile_planned
from .profile import LayerProfile, ProfileError, profile_layers

__all__ = [
    "MeasuredDevice",
    "DeviceModel",
    "LayerProfile",
    "MeasuredCosts",
    "ProfileError",
    "STREAM_CAP",
    "device_model",
    "host_memory_bytes",
    "profile_layers",
    "profile_planned",
]

# Calls in a row a layer is profiled in: a stage's M, at most this many (a paper-size layer's saved
# tensors for M = 32 micro-batches would not fit a host; after a few calls the stream's state of
# caches and allocator is reached).
STREAM_CAP = 8

_CALIBRATION: dict[str, DeviceModel] = {}
_COSTS: dict[tuple, MeasuredCosts] = {}


class MeasuredDevice:
    """The ``measured`` hardware: this device (``cpu`` or ``cuda``), its costs timed and cached."""

    name = "measured"

    def __init__(
        self, device: str = "cpu", repeats: int = 5, calibration: DeviceModel | None = None
    ) -> None:
        self.device, self.repeats = device, repeats
        self._calibration = calibration  # given: a calibration already made (a validation's own)

    def calibration(self) -> DeviceModel:
        """Link and engine overheads of this device, calibrated once per process (and cached)."""
        if self._calibration is not None:
            return self._calibration
        if self.device not in _CALIBRATION:
            _CALIBRATION[self.device] = device_model(self.device)
        return _CALIBRATION[self.device]

    @property
    def memory_bytes(self) -> int:
        if self.device == "cuda":
            return int(torch.cuda.get_device_properties(0).total_memory)
        return host_memory_bytes()

    @property
    def send_occupies_sender(self) -> bool:
        return self.calibration().sender_busy

    @property
    def lookahead(self) -> int | None:
        return DEFAULT_LOOKAHEAD  # gloo moves a message once its receive is posted

    def cost_model(self, workload: Workload, sizes: Sequence[int], M: int) -> CostModel:
        """Each distinct layer of ``workload`` profiled at ``sizes`` in streams of min(M, STREAM_CAP)
        calls (one layer in memory at a time; cached on disk, and in this process for a sweep);
        beyond the largest size, that size's per-sample cost."""
        stream = max(1, min(M, STREAM_CAP))
        sizes = sorted(set(sizes))
        memo = (
            workload.key,
            workload.seed,
            torch.get_num_threads(),
            tuple(sizes),
            self.repeats,
            stream,
            self.device,
        )
        if memo not in _COSTS:
            dm = self.calibration()
            prof = profile_planned(
                workload.layers,
                workload.example,
                workload.targets,
                sizes,
                loss_fn=workload.loss_fn,
                seed=workload.seed,
                repeats=self.repeats,
                device=self.device,
                stream=stream,
            )
            _COSTS[memo] = MeasuredCosts(  # a run's ranks share this host: its link
                prof, dm.ranks_link(host_cores()), dm.overhead_s, "proportional", dm.step_overhead_s
            )
        return _COSTS[memo]

    def trust(self) -> Trust:
        return Trust(
            validated=True,
            max_error=None,
            checks=0,
            basis="this device's engine (make validate-sim reports the error)",
        )

    def record(self) -> dict[str, Any]:
        dm = self.calibration()
        return {
            "name": self.name,
            "kind": "measured",
            "device": dm.device,
            "link_latency_s": dm.link.latency_s if dm.link_measured else None,
            "link_bandwidth_Bps": dm.link.bandwidth_Bps if dm.link_measured else None,
            "link_wake_s": [list(p) for p in dm.link.wake],
            "overhead_s": dm.overhead_s,
            "step_overhead_s": dm.step_overhead_s,
            "shared_message_s": dm.shared_message_s,
            "send_occupies_sender": dm.sender_busy,
            "trust": self.trust().to_dict(),
        }
