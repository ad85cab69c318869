"""Learning curves (``train.eval_every``): held-out scores while training goes on, and schedules whose
first U steps are a U-step run (``lr_schedule=rsqrt``), so one long run also holds the shorter ones."""

import pytest
from test_translation_run import corpus

from gpipe_repro.config.compose import compose
from gpipe_repro.runner import run

MODEL = ["model=transformer_mt", "model.L=1", "model.H=64", "model.A=2", "model.d=32", "optim=adam"]
DATA = ["data=translation", "data.vocab_size=40", "data.max_len=24", "train.batch_size=256"]
QUIET = ["train.warmup_steps=1", "train.progress=false", "logger=none"]
# all 20 sentences, at the end and at every curve point
SCORED = ["train.eval_limit=null", "train.curve_limit=null"]


def _translation(root, *extra):
    return [*MODEL, *DATA, f"data.root={root}", *QUIET, *SCORED, *extra]


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "corpus"
    folder.mkdir()
    corpus(folder)
    # dev = test: the curve's last point (dev, after the last step) must equal the final evaluation
    for lang in ("xx", "en"):
        (folder / f"dev.{lang}").write_text((folder / f"test.{lang}").read_text())
    return folder


@pytest.mark.slow
def test_the_curve_scores_the_model_on_dev_every_n_steps_and_leaves_training_alone(tmp_path, root):
    common = ["pipeline.K=2", "pipeline.M=2", "train.steps=5"]
    with_curve = run(
        compose(_translation(root, *common, "train.eval_every=2"), cuda_available=False),
        tmp_path / "curve",
    )
    without = run(compose(_translation(root, *common), cuda_available=False), tmp_path / "plain")
    assert with_curve.status == "ok", with_curve.error
    assert [p.step for p in with_curve.curve] == [2, 4, 5]  # every 2 steps, and after the last
    assert {p.split for p in with_curve.curve} == {"dev"}
    tokens = [p.tokens for p in with_curve.curve]
    assert all(t is not None for t in tokens) and tokens == sorted(tokens) and tokens[0] > 0
    assert all(p.bleu is not None and p.loss is not None for p in with_curve.curve)
    assert with_curve.curve[0].loss > with_curve.curve[-1].loss  # it learns between the points
    # the last point is the trained model on dev, which here holds the test sentences
    assert with_curve.eval is not None
    assert with_curve.curve[-1].loss == pytest.approx(with_curve.eval.loss, rel=1e-6)
    assert with_curve.curve[-1].bleu == pytest.approx(with_curve.eval.bleu)
    assert with_curve.losses == without.losses  # bit-equal: scoring draws no training randomness
    assert without.curve == []


def test_with_rsqrt_the_first_steps_of_a_longer_run_are_the_shorter_run(tmp_path, root):
    def losses(schedule, steps):
        spec = compose(
            _translation(
                root,
                f"train.lr_schedule={schedule}",
                "train.lr_warmup=1",  # cosine's decay then differs from the update of step 2 on
                f"train.steps={steps}",
                "train.eval=false",
            ),
            cuda_available=False,
        )
        m = run(spec, tmp_path / f"{schedule}-{steps}")
        assert m.status == "ok", m.error
        return m.losses

    assert losses("rsqrt", 4) == losses("rsqrt", 8)[:4]
    # cosine depends on the run's length: the same comparison fails there
    assert losses("cosine", 4) != losses("cosine", 8)[:4]


def test_a_classifier_curve_scores_the_evaluation_split(tmp_path):
    spec = compose(
        [
            "model=mlp",
            "data=digits",  # real, offline, with a held-out split
            "train.batch_size=32",
            "train.steps=4",
            "train.eval_every=3",
            "train.progress=false",
            "logger=none",
        ],
        cuda_available=False,
    )
    m = run(spec, tmp_path / "run")
    assert m.status == "ok", m.error
    assert [p.step for p in m.curve] == [3, 4]
    assert all(p.split == "eval" and p.accuracy is not None for p in m.curve)
    assert m.eval is not None and m.curve[-1].accuracy == pytest.approx(m.eval.accuracy)
    assert [p.samples for p in m.curve] == [3 * 32, 4 * 32]
