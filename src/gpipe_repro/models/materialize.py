"""Build a model on the ``meta`` device, then give real memory only to the layers a rank runs.

Each rank of a K-stage pipeline needs only its own cell. Building the whole model first and then
slicing costs the whole model's memory on every rank: K times the weights the cells hold together,
at the peak. So the runner builds the layer list on ``meta`` (shapes only, no memory, no
random draws), cuts it, and materialises its slice here: ``to_empty`` allocates, then every
submodule's ``reset_parameters`` draws its initial values — children before parents, so a parent that
rescales its children's weights (the Transformer's feed-forward ``ffn_init_scale``) acts last.

The generator is seeded per **global layer index**, so layer i's initial weights are the same
whichever rank builds it and whatever K is: losses stay identical across K (GPipe §2.2).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["materialize", "layer_seed"]


def layer_seed(seed: int, index: int) -> int:
    """The generator seed of global layer ``index`` in a run seeded with ``seed``."""
    return (seed * 1_000_003 + index * 7_919 + 12_345) % (2**63 - 1)


def _post_order(module: nn.Module) -> list[nn.Module]:
    out: list[nn.Module] = []
    for child in module.children():
        out += _post_order(child)
    out.append(module)
    return out


def materialize(
    layers: Sequence[nn.Module], seed: int, first_index: int = 0, device: torch.device | str = "cpu"
) -> list[nn.Module]:
    """Allocate ``layers`` (built on meta) on ``device`` and initialise each from its own seed.

    ``first_index`` is the global index of ``layers[0]``. Raises TypeError for a submodule with
    parameters or buffers of its own but no ``reset_parameters`` (it could not be initialised).
    """
    out = []
    for i, layer in enumerate(layers):
        layer = layer.to_empty(device=device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(layer_seed(seed, first_index + i))
            for m in _post_order(layer):
                own = list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))
                reset = getattr(m, "reset_parameters", None)
                if reset is not None:
                    reset()
                elif own:
                    raise TypeError(
                        f"{type(m).__name__} in layer {first_index + i} has parameters or buffers "
                        "but no reset_parameters(); it cannot be built on the meta device"
                    )
        out.append(layer)
    return out
