"""Global keys: a stage's tensors and optimiser state by global layer index, and back."""

import pytest
import torch
from torch import nn

from gpipe_repro.save.keys import (
    layer_tensors,
    optimizer_groups,
    optimizer_state_dict,
    optimizer_tensors,
)


def stage(seed: int = 0) -> list[nn.Module]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6)), nn.Linear(6, 3)]


def stepped(layers: list[nn.Module], opt: torch.optim.Optimizer) -> None:
    x = torch.randn(8, 4)
    nn.Sequential(*layers)(x).square().mean().backward()
    opt.step()


def test_layer_tensors_use_global_indices_and_share_storage():
    layers = stage()
    t = layer_tensors(layers, 5)
    assert sorted(t) == sorted(
        [
            "layers.5.0.weight",
            "layers.5.0.bias",
            "layers.5.1.weight",
            "layers.5.1.bias",
            "layers.5.1.running_mean",
            "layers.5.1.running_var",
            "layers.5.1.num_batches_tracked",
            "layers.6.weight",
            "layers.6.bias",
        ]
    )
    t["layers.6.bias"].fill_(3.0)  # a view of the parameter: loading writes through
    assert torch.equal(layers[1].bias.detach(), torch.full((3,), 3.0))


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.9, centered=True),
        lambda ps: torch.optim.Adam(ps, lr=0.01, amsgrad=True),
        lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9),
    ],
)
def test_optimizer_state_round_trips_through_global_keys(make):
    layers = stage()
    opt = make([p for m in layers for p in m.parameters()])
    stepped(layers, opt)
    saved = {k: v.clone() for k, v in optimizer_tensors(opt, layers, 5).items()}
    assert all(k.startswith(("optim.layers.5.", "optim.layers.6.")) for k in saved)
    # a fresh optimiser over fresh layers, its parameters listed in another order
    fresh = stage(seed=1)
    opt2 = make([p for m in reversed(fresh) for p in m.parameters()])
    opt2.param_groups[0]["lr"] = 0.5
    opt2.load_state_dict(optimizer_state_dict(opt2, fresh, 5, saved, optimizer_groups(opt)))
    again = optimizer_tensors(opt2, fresh, 5)
    assert again.keys() == saved.keys()
    assert all(torch.equal(again[k], saved[k]) for k in saved)
    assert opt2.param_groups[0]["lr"] == 0.01  # the given groups' hyper-parameters


def test_non_tensor_state_and_foreign_parameters_are_refused():
    layers = stage()
    opt = torch.optim.SGD([p for m in layers for p in m.parameters()], lr=0.1, momentum=0.9)
    stepped(layers, opt)
    opt.state[layers[1].weight]["step"] = 3.0
    with pytest.raises(ValueError, match=r"optimiser state layers\.6\.weight\.step is a float"):
        optimizer_tensors(opt, layers, 5)
    with pytest.raises(ValueError, match="not in this stage's layers"):
        optimizer_tensors(opt, layers[1:], 6)
