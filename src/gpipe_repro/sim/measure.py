"""The measured profile's names at their former place, for validation/ (moving to paper/): import
them from ``sim.measured`` instead; this module goes once nothing imports it."""

from .measured.costs import MeasuredCosts
from .measured.link import fit_link, measure_link
from .measured.overhead import measure_overhead
from .measured.profile import LayerProfile, profile_layers

__all__ = [
    "LayerProfile",
    "MeasuredCosts",
    "fit_link",
    "measure_link",
    "measure_overhead",
    "profile_layers",
]
