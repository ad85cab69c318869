"""The speed probe at its former place, for validation/ and bench/ (moving to paper/): import it from
``sim.measured.speed`` instead; this module goes once nothing imports it."""

from .measured.speed import PROBE_ITERS, normalized, probe_s, reference_s

__all__ = ["PROBE_ITERS", "normalized", "probe_s", "reference_s"]
