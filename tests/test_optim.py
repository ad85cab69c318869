"""Optimisers by name: each config builds its torch optimiser with its own hyper-parameters."""

import pytest
import torch

from gpipe_repro.errors import UserError
from gpipe_repro.optim import OPTIMIZERS, AdamConfig, RMSpropConfig, build_optimizer


def test_each_option_builds_its_optimiser_with_its_settings():
    p = [torch.nn.Parameter(torch.zeros(3))]
    opt = build_optimizer(p, RMSpropConfig(lr=0.01, alpha=0.5))
    assert (
        isinstance(opt, torch.optim.RMSprop)
        and opt.defaults["alpha"] == 0.5
        and opt.defaults["lr"] == 0.01
    )
    adam = build_optimizer(p, AdamConfig(betas=[0.8, 0.9]))
    assert isinstance(adam, torch.optim.Adam) and adam.defaults["betas"] == (0.8, 0.9)
    assert list(OPTIMIZERS) == ["rmsprop", "sgd", "adam"]


@pytest.mark.parametrize("betas", [[0.9], [0.9, 1.0], [0.9, 0.99, 0.1]])
def test_adam_betas_are_checked(betas):
    with pytest.raises(UserError, match=r"optim.betas=.* is invalid; allowed: two numbers"):
        OPTIMIZERS["adam"].check(AdamConfig(betas=betas))  # type: ignore[misc]


def test_learning_rate_schedules():
    from gpipe_repro.optim import lr_factor

    assert [lr_factor("constant", s, 10) for s in (0, 5, 9)] == [1.0, 1.0, 1.0]
    assert [lr_factor("constant", s, 10, warmup=4) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cos = [lr_factor("cosine", s, 10) for s in range(11)]
    assert cos[0] == 1.0 and cos[10] == pytest.approx(0.0) and cos[5] == pytest.approx(0.5)
    assert all(a >= b for a, b in zip(cos, cos[1:]))
    assert lr_factor("cosine", 2, 10, warmup=2) == 1.0  # the decay starts after the warm-up


def test_rsqrt_schedule_decays_as_the_inverse_square_root_and_ignores_the_length():
    from gpipe_repro.optim import lr_factor

    warm = [lr_factor("rsqrt", s, 100, warmup=4) for s in range(4)]
    assert warm == [0.25, 0.5, 0.75, 1.0]  # the same linear warm-up as the others
    assert lr_factor("rsqrt", 15, 100, warmup=4) == pytest.approx(0.5)  # sqrt(4 / 16)
    assert lr_factor("rsqrt", 63, 100, warmup=4) == pytest.approx(0.25)  # sqrt(4 / 64)
    # A function of the step alone: a 50-step run follows the first 50 steps of a 200-step one.
    assert [lr_factor("rsqrt", s, 50, warmup=4) for s in range(50)] == [
        lr_factor("rsqrt", s, 200, warmup=4) for s in range(50)
    ]
