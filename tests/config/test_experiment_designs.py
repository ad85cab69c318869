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


def _params(spec: Any) -> int:
    from gpipe_repro.runplan.plan import plan_model

    return sum(p.numel() for layer in plan_model(spec).layers for p in layer.parameters())


def test_fig3_compares_the_smallest_with_a_parameter_matched_deep_wide_pair_on_one_recipe():
    sizes = {
        m: _spec("experiment=fig3", f"mt_size={m}") for m in ("T1-512-4", "T4-512-4", "T2-1024-8")
    }
    smallest, deep, wide = (_params(s) for s in sizes.values())
    assert smallest < min(deep, wide) and abs(deep - wide) / wide < 0.002  # 4,224 of 3.67M apart
    assert sizes["T4-512-4"].model.L > sizes["T2-1024-8"].model.L  # deep is deeper, wide is wider
    assert sizes["T4-512-4"].model.H < sizes["T2-1024-8"].model.H
    recipes = [_without(s, "model.L", "model.H", "model.A") for s in sizes.values()]
    assert all(r == recipes[0] for r in recipes)  # only the model differs


def test_fig3_low_resource_languages_are_small_disjoint_slices_of_the_verses():
    from gpipe_repro.data.translation.mix import resource_of

    d = _spec("experiment=fig3").data
    assert d.corpora[0] == "es-en" and all(c.endswith("-synthetic") for c in d.corpora[1:])
    ends = [k + n for k, n in zip(d.train_offsets, d.train_sizes)]
    assert all(ends[i] <= d.train_offsets[i + 1] for i in range(len(ends) - 1))  # no verse twice
    assert [resource_of(n, d.train_sizes[0]) for n in d.train_sizes] == ["high", "low", "low"]
    assert all(n <= 500 for n in d.train_sizes[1:])  # a few hundred pairs


def test_fig3_tricks_differ_only_in_the_tricks_on_a_deeper_model_than_fig3s():
    with_, without = (
        _spec("experiment=fig3_tricks", f"mt_size={m}") for m in ("T16-512-4", "T16-512-4-notricks")
    )
    assert with_.model.ffn_init_scale and with_.model.logit_clip is not None
    assert not without.model.ffn_init_scale and without.model.logit_clip is None
    tricks = ("model.ffn_init_scale", "model.logit_clip")
    assert _without(with_, *tricks) == _without(without, *tricks)
    fig3 = _spec("experiment=fig3", "mt_size=T4-512-4")
    assert with_.model.L > fig3.model.L and with_.data == fig3.data and with_.optim == fig3.optim


def test_table4_ladder_pretrains_growing_networks_with_one_recipe():
    ladder = [_spec("experiment=table4_pretrain", f"model.D={D}") for D in (8, 16, 32)]
    counts = [_params(s) for s in ladder]
    assert counts == sorted(counts) and counts[-1] > 10 * counts[0]
    assert all(_without(s, "model.D") == _without(ladder[0], "model.D") for s in ladder)
