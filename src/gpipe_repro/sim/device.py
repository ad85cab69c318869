"""This device's calibration at its former place, for validation/ (moving to paper/): import it from
``sim.measured`` instead; this module goes once nothing imports it."""

from .measured.device import DeviceModel, device_model, host_memory_bytes

__all__ = ["DeviceModel", "device_model", "host_memory_bytes"]
