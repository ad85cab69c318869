"""Published profiles anchored on published training throughputs (``sim.anchors``)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gpipe_repro.sim.anchors import (
    ANCHOR_MODELS,
    MIN_ANCHORS,
    TOLERANCE,
    check,
    fit,
    scaled,
    simulate_anchor,
    trust,
)
from gpipe_repro.sim.hardware import load_profile, published_names

PUBLISHED = published_names()


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_CACHE", str(tmp_path))


@pytest.mark.parametrize("name", PUBLISHED)
def test_every_published_profile_has_cited_anchors_of_known_models(name):
    hw = load_profile(name)
    assert len(hw.anchors) >= MIN_ANCHORS
    assert any(a.use == "fit" for a in hw.anchors) and any(a.use == "check" for a in hw.anchors)
    for a in hw.anchors:
        assert a.model in ANCHOR_MODELS and a.source.startswith("https://") and a.note


def test_fitting_makes_the_fit_anchor_right_and_more_efficiency_is_faster():
    p100 = load_profile("p100_pcie")
    (fitted_anchor,) = [a for a in p100.anchors if a.use == "fit"]
    fitted, factor = fit(scaled(p100, 0.5))  # from a curve half as high: the factor recovers it
    assert abs(simulate_anchor(fitted, fitted_anchor).error) < 0.01
    assert factor == pytest.approx(2.0, rel=0.05)
    slow, fast = (simulate_anchor(scaled(p100, f), fitted_anchor) for f in (0.5, 1.0))
    assert fast.predicted > slow.predicted  # compute-bound enough to follow the curve
    assert all(e <= 1.0 for _, e in scaled(p100, 10.0).efficiency_curve)  # capped at peak


def test_an_anchor_is_per_device_and_a_faster_variant_scales_the_peak():
    p100 = load_profile("p100_pcie")
    a = p100.anchors[0]
    assert simulate_anchor(p100, a).published == pytest.approx(a.throughput / a.devices)
    plain = simulate_anchor(p100, dataclasses.replace(a, peak_scale=1.0)).predicted
    assert simulate_anchor(p100, a).predicted > plain  # the SXM2 variant's higher clock


def test_trust_sums_up_the_anchors():
    tpu = load_profile("tpu_v3")
    t = trust(tpu)
    errors = [abs(r.error) for r in check(tpu)]
    assert t.checks == len(tpu.anchors) and t.max_error == pytest.approx(max(errors))
    assert t.validated == (max(errors) <= TOLERANCE)
    one = dataclasses.replace(tpu, anchors=tpu.anchors[:1])
    assert not trust(one).validated  # a single anchor never validates a profile
    assert math.isfinite(trust(one).max_error)


def test_the_command_prints_each_anchors_error_and_writes_only_a_fit(capsys):
    from gpipe_repro.sim.anchors.__main__ import main

    main(["tpu_v3"])
    lines = capsys.readouterr().out.splitlines()
    errors = [f"{r.error:+.1%}" for r in check(load_profile("tpu_v3"))]
    assert lines[0] == "tpu_v3:" and [ln.split()[-1] for ln in lines[1:]] == errors
    with pytest.raises(SystemExit) as stop:
        main(["tpu_v3", "--write"])  # --write without --fit would write an unfitted curve
    assert stop.value.code == 2 and "--write writes the fitted curve" in capsys.readouterr().err


def test_the_translation_anchors_are_the_published_models():
    from gpipe_repro.sim.anchors import counts

    def per_sample(model: str, seq: int) -> tuple[float, int]:
        cs = counts(model, seq)
        return sum(sum(c.fwd_ops) for c in cs) / cs[0].batch, sum(c.params for c in cs)

    # Switch Transformers, Table 9: T5-Base 124 and T5-Large 425 GFLOPs a sequence (512 in, 114 out)
    for model, published in (("t5_base", 124e9), ("t5_large", 425e9)):
        flops, _ = per_sample(model, 512)
        assert flops == pytest.approx(published, rel=0.2), model
    # Vaswani et al., Table 3: the base model has 65M parameters, its embeddings and softmax shared
    # (here the softmax has its own 37000 x 512 matrix, which adds no FLOPs to share)
    flops, params = per_sample("transformer_base", 32)
    assert params - 37000 * 512 == pytest.approx(65e6, rel=0.05)
    # the same model at twice the tokens a side costs a little over twice (attention's seq^2)
    assert 2.0 < per_sample("transformer_base", 64)[0] / flops < 2.2


@pytest.mark.parametrize("name", ["tpu_v3", "p100_pcie"])
def test_the_profiles_of_the_papers_devices_have_token_anchors(name):
    fed = {ANCHOR_MODELS[a.model].describe for a in load_profile(name).anchors if a.seq > 0}
    assert len(fed) >= 1 and len([a for a in load_profile(name).anchors if a.seq > 0]) >= 2
