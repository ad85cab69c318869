"""The quality experiments' designs hold what their claims need (issue 20): Table 5's runs see the
same tokens and hold the paper's same-updates runs as prefixes; Fig. 3's languages are what its
labels say; Table 4's ladder grows the pre-trained network with one recipe."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.optim import lr_factor


def _spec(*overrides: str) -> Any:
    return compose(list(overrides), cuda_available=False)


def _without(spec: Any, *keys: str) -> dict[str, Any]:
    d = asdict(spec)
    for key in keys:
        section, name = key.split(".")
        d[section].pop(name)
    return d


@pytest.mark.parametrize("suffix", ["", "-quick"])
def test_table5_runs_are_token_matched_and_hold_the_same_updates_runs_as_prefixes(suffix):
    runs = {M: _spec("experiment=table5", f"table5_run=M{M}{suffix}") for M in (1, 2, 4)}
    U = runs[4].train.steps
    assert [runs[M].train.steps for M in (1, 2, 4)] == [4 * U, 2 * U, U]
    assert len({s.train.steps * s.train.batch_size for s in runs.values()}) == 1  # same tokens
    assert [runs[M].train.batch_size for M in (1, 2, 4)] == [1024, 2048, 4096]
    # Only the number of micro-batches and of updates differ: the same optimiser settings.
    varying = ("pipeline.M", "train.steps", "train.batch_size")
    assert _without(runs[1], *varying) == _without(runs[4], *varying)
    # The paper's design is every run at update U: the learning rate there must not depend on the
    # run's length, and the curve must have a point there.
    t = runs[1].train
    assert [lr_factor(t.lr_schedule, s, 4 * U, t.lr_warmup) for s in range(U)] == [
        lr_factor(t.lr_schedule, s, U, t.lr_warmup) for s in range(U)
    ]
    assert t.eval_every > 0 and U % t.eval_every == 0
