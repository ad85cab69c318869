"""Optimisers by name: each config builds its torch optimiser with its own hyper-parameters."""

import pytest
import torch

from gpipe_repro.errors import UserError
from gpipe_repro.optim import OPTIMIZERS, AdamConfig, RMSpropConfig, build_optimizer


def test_each_option_builds_its_optimiser_with_its_settings():
    p = [torch.nn.Parameter(torch.zeros(3))]
    opt = build_optimizer(p, RMSpropConfig(lr=0.01, alpha=0.5))
    assert isinstance(opt, torch.optim.RMSprop) and opt.defaults["alpha"] == 0.5 and opt.defaults["lr"] == 0.01
    adam = build_optimizer(p, AdamConfig(betas=[0.8, 0.9]))
    assert isinstance(adam, torch.optim.Adam) and adam.defaults["betas"] == (0.8, 0.9)
    assert list(OPTIMIZERS) == ["rmsprop", "sgd", "adam"]


@pytest.mark.parametrize("betas", [[0.9], [0.9, 1.0], [0.9, 0.99, 0.1]])
def test_adam_betas_are_checked(betas):
    with pytest.raises(UserError, match=r"optim.betas=.* is invalid; allowed: two numbers"):
        OPTIMIZERS["adam"].check(AdamConfig(betas=betas))  # type: ignore[misc]
