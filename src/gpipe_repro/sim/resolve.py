"""The run's hardware, resolved once from the ``hardware`` config: this device measured, or a published one."""

from __future__ import annotations

from .hardware import MEASURED, HardwareConfig, PublishedDevice, profile_of
from .interface import Hardware
from .measured import MeasuredDevice

__all__ = ["resolve_hardware"]


def resolve_hardware(cfg: HardwareConfig, device: str = "cpu", repeats: int = 5) -> Hardware:
    """``measured`` times this device (``device``: cpu or cuda; ``repeats`` per profiled layer); any
    other config is the published device it describes. The one place that tells the two apart."""
    if cfg.name == MEASURED:
        return MeasuredDevice(device, repeats)
    return PublishedDevice(profile_of(cfg))
