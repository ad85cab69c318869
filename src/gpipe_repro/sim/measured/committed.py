"""A measured profile kept as a file: per-layer costs timed on one device, simulated anywhere.

``hardware=measured`` times the device it runs on and caches the result per machine. A GPU seen for
minutes (``make gpu-check`` on a lent host) leaves its measurement behind instead: each Table 2/3
model's per-layer costs profiled on that GPU (``sim.measured.distinct``) with the engine's overheads
calibrated there (``device``), written with what they were measured on to
``reports/gpu/profiles/<experiment>.json``. Loaded back on any machine (``load``), the file is a
``sim.Hardware`` (``CommittedDevice``) whose costs are those figures, so the tables simulate their
cells on them as on any profile — a series "simulated from per-layer costs measured on an H100".

One GPU cannot measure the link between two: a committed profile carries the link figures of the
published profile of its device (``conf/hardware/h100.yaml`` for an H100: NVLink, its latency as
estimated there), named in the file (``link_from``); a device with no published profile gets no link,
and its K >= 2 cells fail in one line (``UnmeasuredLink``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...engine.pipeline import DEFAULT_LOOKAHEAD
from ..costs import CostModel, Link
from ..interface import Trust, Workload
from .costs import MeasuredCosts
from .link import UnmeasuredLink
from .profile import LayerProfile

__all__ = [
    "FORMAT",
    "CommittedDevice",
    "CommittedProfile",
    "published_for",
    "borrowed_link",
    "load",
    "save",
    "measured_now",
]

FORMAT = 1
# the published profile (conf/hardware/<name>.yaml) of a device, by a word of its CUDA name
_PUBLISHED = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("V100", "v100_nvlink"))


def published_for(device: str) -> str | None:
    """The published profile whose link a measured ``device`` borrows (None: none is published)."""
    return next((name for word, name in _PUBLISHED if word in device), None)


def borrowed_link(device: str) -> tuple[Link | None, str]:
    """The link a profile measured on one ``device`` carries, and where it is from (its published
    profile's figures; none where no profile is published)."""
    from ..hardware import load_profile

    mine = published_for(device)
    if mine is None:
        return None, "none"
    return load_profile(mine).link, f"conf/hardware/{mine}.yaml (one GPU cannot measure its link)"


@dataclass
class CommittedProfile:
    """What a committed file holds: the model's per-layer costs on ``device`` and how they were
    taken."""

    experiment: str  # e.g. table2_amoebanet: whose model (and data shapes) was profiled
    model_key: str  # runplan.costing.model_key of that model: a changed model no longer matches
    device: str  # the CUDA device's name (or the CPU's, for a test)
    memory_bytes: int
    profile: LayerProfile
    overhead_s: float
    step_overhead_s: float
    link: Link | None  # None: no published profile to borrow it from
    link_from: str  # where the link figures come from, in words
    measured: dict[str, Any]  # torch, precision settings, date, commit, command

    @property
    def label(self) -> str:
        """The series' hardware label: where the costs were measured."""
        return f"measured on {self.device}"

    def costs(self) -> MeasuredCosts:
        link = self.link or UnmeasuredLink(
            0.0,
            float("inf"),
            reason=f"{self.label}: no link figures (no published profile for this device), so "
            "K >= 2 cannot be simulated on it",
        )
        return MeasuredCosts(
            self.profile, link, self.overhead_s, "proportional", self.step_overhead_s
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "experiment": self.experiment,
            "model_key": self.model_key,
            "device": self.device,
            "memory_bytes": self.memory_bytes,
            "overhead_s": self.overhead_s,
            "step_overhead_s": self.step_overhead_s,
            "link": asdict(self.link) if self.link else None,
            "link_from": self.link_from,
            "measured": self.measured,
            "profile": self.profile.to_json(),
        }


def save(p: CommittedProfile, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(p.to_json(), indent=1) + "\n")
    return path


def load(path: Path) -> CommittedProfile:
    """The file at ``path``; ``ValueError`` (one line) when it is not a committed profile."""
    try:
        d = json.loads(path.read_text())
        if d.get("format") != FORMAT:
            raise ValueError(f"format {d.get('format')!r}, expected {FORMAT}")
        link = d["link"]
        if link is not None:
            link = Link(**{**link, "wake": tuple(tuple(w) for w in link.get("wake", ()))})
        return CommittedProfile(
            d["experiment"],
            d["model_key"],
            d["device"],
            int(d["memory_bytes"]),
            LayerProfile.from_json(d["profile"], {"committed": str(path)}),
            float(d["overhead_s"]),
            float(d["step_overhead_s"]),
            link,
            d["link_from"],
            dict(d.get("measured", {})),
        )
    except (OSError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: not a committed measured profile ({err})") from None


class CommittedDevice:
    """A committed profile as a ``sim.Hardware``: its costs whatever the workload asks (the file
    holds one model's; ``cost_model`` refuses another's)."""

    def __init__(self, committed: CommittedProfile) -> None:
        self.committed = committed
        self.name = committed.label

    @property
    def memory_bytes(self) -> int:
        return self.committed.memory_bytes

    @property
    def send_occupies_sender(self) -> bool:
        return False  # nccl runs its transfers on a side stream

    @property
    def lookahead(self) -> int | None:
        return DEFAULT_LOOKAHEAD

    def cost_model(self, workload: Workload, sizes: Sequence[int], M: int) -> CostModel:
        if workload.key != self.committed.model_key:
            raise ValueError(
                f"{self.name}: the committed profile was measured for another model "
                f"({self.committed.experiment}); measure it again with make gpu-check"
            )
        return self.committed.costs()

    def trust(self) -> Trust:
        return Trust(
            validated=False,
            max_error=None,
            checks=0,
            basis=f"per-layer costs measured on {self.committed.device}; link: "
            f"{self.committed.link_from}",
        )

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "committed",
            "device": self.committed.device,
            "link_from": self.committed.link_from,
            "measured": self.committed.measured,
            "trust": self.trust().to_dict(),
        }


def measured_now(command: str, **more: Any) -> dict[str, Any]:
    """The ``measured`` record of a profile taken now: torch, its fp32 precision settings, date."""
    import torch

    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "matmul_fp32_precision": torch.backends.cuda.matmul.fp32_precision,
        "conv_fp32_precision": torch.backends.cudnn.conv.fp32_precision,  # type: ignore[attr-defined]
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": command,
        **more,
    }
