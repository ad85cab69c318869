"""The command line before anything runs, every experiment's whole sweep, and the option reference."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from _shared import write_corpus
from hydra import compose as hydra_compose
from omegaconf import OmegaConf

from gpipe_repro.config.compose import CONF_DIR, _hydra, compose, preflight, to_spec
from gpipe_repro.config.docs import markdown
from gpipe_repro.runner import run
from gpipe_repro.runplan.plan import plan_model

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["data=imagenet"], "data=imagenet is not a data config; allowed: "),
        (["pipeline.nope=1"], "pipeline.nope is not a config key"),
        (["pipelin.K=2"], "pipelin.K is not a config key; did you mean pipeline.K?"),
        (["+pipelin.K=2"], "pipelin.K is not a config key; did you mean pipeline.K?"),
        (["+pipeline.k=2"], "pipeline.k is not a config key; did you mean pipeline.K?"),
        (["pipeline.K=abc"], "pipeline.K='abc' is not an integer; allowed: an integer >= 1"),
        (["-m", "pipeline.K=1,abc"], "pipeline.K='abc' is not an integer"),
        (["optim=adam", "optim.betas=abc"], "optim.betas='abc' is not a list"),
        (
            ["optim.betas=[0.9,0.99]"],
            "optim.betas is not a key of optim=rmsprop; optim=adam has it",
        ),
        (
            ["model=tuplenet", "model.chanels=3"],
            "model.chanels is not a key of model=tuplenet; did you mean model.channels?",
        ),
        (["train.eval=maybe"], "train.eval='maybe' is not a boolean"),
        (
            ["hydra/launcher=nonexistent"],
            "hydra/launcher=nonexistent is not a hydra/launcher config; allowed: basic",
        ),
        (["pipeline.K=[1"], ""),
    ],
)
def test_preflight_names_the_mistake_in_one_line(argv, message):
    err = preflight(argv)
    assert err is not None and message in err and "\n" not in err


def test_preflight_accepts_good_command_lines():
    assert preflight(["pipeline.K=2", "model=tuplenet"]) is None
    assert preflight(["-m", "pipeline.K=1,2", "pipeline.M=1,2", "pipeline=1f1b"]) is None
    assert preflight(["hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2"]) is None


def _sweep(name: str) -> list[list[str]]:
    """The jobs an experiment declares: the cartesian product of its hydra.sweeper.params."""
    with _hydra():
        cfg = hydra_compose("config", overrides=[f"experiment={name}"], return_hydra_config=True)
    declared = cfg.hydra.sweeper.params  # None: an experiment of one run (no sweep)
    params = (OmegaConf.to_container(declared) if declared is not None else None) or {}
    axes = [[f"{k}={v.strip()}" for v in str(vals).split(",")] for k, vals in params.items()]
    return (
        [[f"experiment={name}", *job] for job in itertools.product(*axes)]
        if axes
        else [[f"experiment={name}"]]
    )


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_job_of_every_experiment_composes_and_validates(name):
    jobs = _sweep(name)
    assert jobs
    for job in jobs:
        spec = compose(job, cuda_available=False)
        assert spec.experiment_name == name
        plan_model(spec)  # K and balance against the model's layers, on the meta device


def _offline_text(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Overrides that put small fixture corpora in place of a translation experiment's real ones (the
    Debian packages are not fetched in a test): one root, or one per data.corpora entry."""
    spec = compose([f"experiment={name}"], cuda_available=False)
    if spec.data.name != "translation":
        return []
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path / "cache"))
    roots = []
    for lang in [f"x{i}" for i in range(len(spec.data.corpora or [None]))]:
        splits = {}
        for split, n in (("train", 40), ("dev", 4), ("test", 4)):
            words = [" ".join(f"w{(i * 7 + j) % 13}" for j in range(3 + i % 4)) for i in range(n)]
            splits[split] = [(f"{lang} {w}", f"{w} .") for w in words]
        roots.append(write_corpus(tmp_path / lang, lang, splits))
    # no learning curve: decoding a 30-piece fixture is not what this test is about (test_curve is)
    tiny = ["data.vocab_size=30", "train.eval_every=0"]
    if spec.data.corpora is None:
        return [f"data.root={roots[0]}", *tiny]
    # the fixtures are small: no slices of them (the experiment's offsets point past their end)
    return [
        f"data.corpora=[{','.join(roots)}]",
        "data.train_sizes=null",
        "data.train_offsets=null",
        *tiny,
    ]


# one sequence per micro-batch: at 32 (M = 1) the 32k-vocabulary softmax alone needs more than a
# 16 GiB device, which the memory guard refuses (as the tables' M = 1 cells say)
ONE_LAYER_FITS = {"table2_transformer": ["pipeline.M=32"], "table3_transformer": ["pipeline.M=32"]}
# fig3_tricks's T(16, 512, 4) (34 layers) takes 14 s here, most of it the memory planner's;
# T(8, 512, 4) (18 layers) keeps both tricks and a model deeper than fig3's in 8 s (the experiment's
# own jobs compose and validate whole: the test above)
FEWER_LAYERS = {"fig3_tricks": ["model.L=8"]}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_runs_two_steps(name, tmp_path, monkeypatch):
    spec = compose(
        [
            f"experiment={name}",
            "logger=none",
            "train.steps=2",
            "train.warmup_steps=1",
            "train.progress=false",
            "train.eval=false",
            "pipeline.K=1",
            *ONE_LAYER_FITS.get(name, []),
            *FEWER_LAYERS.get(name, []),
            *_offline_text(name, tmp_path, monkeypatch),
        ],
        cuda_available=False,
    )
    m = run(spec, tmp_path)
    assert m.status == "ok", m.error
    if (
        m.source == "simulated"
    ):  # backend=auto on a host without a GPU per stage: no losses to report
        assert m.step_time_s and len(m.step_times_s) == 2
    else:
        assert len(m.losses) == 2


def test_to_spec_gives_typed_sections():
    with _hydra():
        cfg = hydra_compose("config", overrides=["model=amoebanet_d", "pipeline=1f1b"])
    spec = to_spec(cfg, cuda_available=False)
    assert type(spec.model).__name__ == "AmoebaNetDConfig" and spec.model.L == 6
    assert spec.pipeline.schedule == "1f1b" and spec.device == "cpu"


def test_option_reference_is_generated_from_the_schema():
    assert (ROOT / "docs" / "config.md").read_text() == markdown(), (
        "docs/config.md is stale: python -m gpipe_repro.config.docs --out docs"
    )


def test_each_schedule_is_a_pipeline_group_and_interleaved_brings_two_cells_per_stage():
    """``pipeline=<schedule>`` for every schedule of the engine; interleaved needs v >= 2, so its
    group sets two cells per stage (the least), the others one."""
    from gpipe_repro.engine import SCHEDULES

    for name in SCHEDULES:
        spec = compose([f"pipeline={name}", "pipeline.K=2", "pipeline.M=2"])
        assert spec.pipeline.schedule == name
        assert spec.pipeline.virtual_stages == (2 if name == "interleaved" else 1)
