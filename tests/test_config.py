"""Every experiment composes and validates; validation messages name field, value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from gpipe_repro.cli import CONF_DIR, preflight
from gpipe_repro.config import spec_from_config
from gpipe_repro.errors import UserError
from gpipe_repro.runner import run

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def compose_plain(*overrides: str) -> dict:
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_and_runs_two_steps(name, tmp_path):
    plain = compose_plain(f"experiment={name}", "logger=none", "train.steps=2", "train.warmup_steps=1",
                          "train.progress=false", "train.eval=false")
    assert plain["experiment_name"] == name
    spec = spec_from_config(plain, lambda d: "cpu")
    spec.pipeline.K = 1  # the experiment's own sweep sets K; one process is enough here
    m = run(spec, tmp_path)
    assert m["status"] == "ok", m.get("error")
    assert len(m["losses"]) == 2


@pytest.mark.parametrize(
    "override,message",
    [({"pipeline": {"checkpoint": "sometimes"}}, "pipeline.checkpoint='sometimes' is not allowed; allowed: never, except_last, always"),
     ({"pipeline": {"host_memory": "swap"}}, "pipeline.host_memory='swap' is not allowed; allowed: retain, system"),
     ({"pipeline": {"schedule": "zb"}}, "pipeline.schedule='zb' is not allowed; allowed: gpipe, 1f1b"),
     ({"pipeline": {"replicas": 0}}, "pipeline.replicas=0 is invalid"),
     ({"pipeline": {"replicas": 3}}, "pipeline.replicas=3 does not divide train.batch_size=64"),
     ({"pipeline": {"M": 128}}, "pipeline.M=128 exceeds the mini-batch of 64"),
     ({"pipeline": {"K": 2, "balance": [1, 2, 3]}}, "has 3 cells but pipeline.K=2"),
     ({"train": {"steps": 3, "warmup_steps": 3}}, "train.warmup_steps=3 leaves no timed step"),
     ({"optim": {"name": "lamb"}}, "optim.name='lamb' is not allowed; allowed: rmsprop, sgd, adam"),
     ({"device": "tpu"}, "device='tpu' is not allowed; allowed: auto, cpu, cuda")],
)
def test_validation_messages(override, message):
    plain = compose_plain()
    for k, v in override.items():
        if isinstance(v, dict):
            plain[k].update(v)
        else:
            plain[k] = v
    with pytest.raises(UserError) as err:
        spec_from_config(plain)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_preflight_names_the_group_and_its_options():
    assert preflight(["data=imagenet"]).startswith("data=imagenet is not a data config; allowed: ")
    assert "pipeline.nope" in preflight(["pipeline.nope=1"])
    assert preflight(["pipeline.K=2", "model=tuplenet"]) is None
    assert preflight(["-m", "pipeline.K=1,2", "pipeline.M=1,2"]) is None


def test_conf_dir_has_every_group():
    for group in ("model", "data", "pipeline", "optim", "logger", "experiment"):
        assert list((Path(CONF_DIR) / group).glob("*.yaml")), group


def test_choices_match_the_engine():
    # config.py avoids importing torch (fast command-line checks), so it repeats the engine's choices.
    from gpipe_repro import config
    from gpipe_repro.engine import CHECKPOINT_MODES, SCHEDULES
    from gpipe_repro.engine.hostmem import HOST_MEMORY_MODES

    assert tuple(config.CHECKPOINTS) == tuple(CHECKPOINT_MODES)
    assert tuple(config.SCHEDULES) == tuple(SCHEDULES)
    assert tuple(config.HOST_MEMORY) == tuple(HOST_MEMORY_MODES)
