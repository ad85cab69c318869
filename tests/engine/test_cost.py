"""Per-layer cost estimates used by the partitioner."""

import torch
from torch import nn

from gpipe_repro.engine.cost import layer_costs


def layers():
    torch.manual_seed(0)
    return [nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.Linear(64, 4)]


def test_params_flops_memory_and_time_rank_layers_sensibly():
    ls, x = layers(), torch.randn(16, 8)
    assert layer_costs(ls, None, "params") == [8 * 64 + 64, 0, 64 * 64 + 64, 64 * 4 + 4]
    flops = layer_costs(ls, x, "flops")
    assert flops[0] == 3 * 2 * 16 * 8 * 64  # forward 2*N*in*out, backward twice that
    assert flops[2] == 3 * 2 * 16 * 64 * 64 and flops[1] == 0
    mem = layer_costs(ls, x, "memory")
    assert mem[1] == 16 * 64 * 4  # ReLU saves its output
    assert mem[0] == 16 * 8 * 4  # the first Linear saves its input
    t = layer_costs(ls, x, "time")
    assert all(v > 0 for v in t)


def test_flops_work_on_the_meta_device_for_tuple_layers():
    from gpipe_repro.models.amoebanet import amoebanet_layers

    with torch.device("meta"):
        ls = amoebanet_layers("D", 3, 16, classes=10, image_size=32)
        x = torch.empty(2, 3, 32, 32)
    flops = layer_costs(ls, x, "flops")
    assert len(flops) == len(ls) and all(f > 0 for f in flops)
