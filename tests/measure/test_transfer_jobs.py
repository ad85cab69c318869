"""measure.transfer_jobs (Table 4's runs): one recipe for pre-training and fine-tuning, equal budgets, a config-keyed cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.measure.transfer_jobs import (
    CANONICAL,
    FINETUNE,
    PRETRAIN,
    QUICK,
    finetune_jobs,
    pretrain_job,
    pretrain_key,
)


def test_fine_tuning_uses_the_pre_training_recipe():
    pre, ft = (
        compose([f"experiment={PRETRAIN}"], check=False),
        compose([f"experiment={FINETUNE}"], check=False),
    )
    assert pre.model == ft.model  # the same architecture and size: the save loads
    assert pre.optim == ft.optim  # the paper: the pre-training's hyper-parameters
    for key in ("batch_size", "lr_schedule", "lr_warmup", "threads"):
        assert getattr(pre.train, key) == getattr(ft.train, key), key
    for key in ("image_size", "cutout", "flip"):
        assert getattr(pre.data, key) == getattr(ft.data, key), key
    assert (pre.pipeline.M, pre.pipeline.checkpoint) == (ft.pipeline.M, ft.pipeline.checkpoint)
    assert set(pre.data.classes).isdisjoint(ft.data.classes)  # new classes
    assert (
        pre.train.save_every == pre.train.steps
        and ft.train.init_from is None
        and ft.train.init_skip is None
    )


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("work")
    return finetune_jobs(QUICK, Path("/saves/save-150"), work)


def _without(argv: list[str], prefix: str) -> list[str]:
    return [a for a in argv if not a.startswith(prefix)]


def test_pretrained_and_scratch_differ_only_in_init_from(jobs):
    by = {(j.meta["target"], j.meta["init"], j.meta["K"]): j for j in jobs}
    for t in QUICK.targets:
        pre, scratch = by[(t.key, "pretrained", 1)], by[(t.key, "scratch", 1)]
        assert "train.init_from=/saves/save-150" in pre.argv
        assert not any(a.startswith("train.init_from") for a in scratch.argv)
        assert _without(_without(pre.argv, "train.init_from"), "hydra.sweep.dir") == _without(
            scratch.argv, "hydra.sweep.dir"
        )
        assert pre.after == "pretrain" and scratch.after is None
        assert pre.meta["steps"] == scratch.meta["steps"] == 50  # QUICK's budget, both
        seeds = ",".join(map(str, QUICK.seeds))
        assert pre.argv[0] == "-m" and f"seed={seeds}" in pre.argv
        assert [p.name for p in pre.runs] == [f"s{s}" for s in QUICK.seeds]


def test_the_k_check_reruns_the_lead_target_pretrained(jobs):
    lead = QUICK.targets[0].key
    k1 = next(j for j in jobs if j.name == f"{lead}-pretrained-K1")
    for K in QUICK.k_check:
        kk = next(j for j in jobs if j.name == f"{lead}-pretrained-K{K}")
        assert kk.slots == K and f"pipeline.K={K}" in kk.argv
        assert _without(_without(kk.argv, "pipeline.K"), "hydra.sweep.dir") == _without(
            _without(k1.argv, "pipeline.K"), "hydra.sweep.dir"
        )
    assert len(jobs) == 2 * len(QUICK.targets) + len(QUICK.k_check)


def test_digits_are_never_flipped_and_fashion_is(jobs):
    for j in jobs:
        assert j.meta["data"]["flip"] == (j.meta["data"]["name"] == "fashion_mnist"), j.name
        assert j.meta["data"]["image_size"] == 28


def test_the_pretrain_key_follows_the_weights_only():
    base = pretrain_key(compose([f"experiment={PRETRAIN}"], check=False))
    assert base == pretrain_key(compose([f"experiment={PRETRAIN}"], check=False))
    same = [
        "logger=none",
        "train.progress=false",
        "data.workers=2",
        "train.eval=false",
        "pipeline.timeout_s=60",
        "train.save_every=7",
    ]
    assert pretrain_key(compose([f"experiment={PRETRAIN}", *same], check=False)) == base
    for other in ("optim.lr=0.1", "train.steps=10", "seed=1", "model.D=8", "data.classes=[0,1]"):
        assert pretrain_key(compose([f"experiment={PRETRAIN}", other], check=False)) != base, other


def test_the_pretrain_job_saves_once_at_the_end_into_the_keyed_cache(tmp_path):
    job, save = pretrain_job(CANONICAL, cache=tmp_path)
    steps = compose([f"experiment={PRETRAIN}"], check=False).train.steps
    assert job.folder == tmp_path / f"pretrain-{job.meta['key']}"
    assert save == job.folder / "saves" / f"save-{steps}"
    assert f"train.save_every={steps}" in job.argv and f"hydra.run.dir={job.folder}" in job.argv
    assert "logger=none" in job.argv
    assert "logger=none" not in pretrain_job(CANONICAL, cache=tmp_path, wandb=True)[0].argv


def test_the_ladder_is_the_pre_training_sweep_declared_in_the_experiment():
    import yaml

    conf = yaml.safe_load(Path("conf/experiment/table4_pretrain.yaml").read_text())
    declared = {int(d) for d in str(conf["hydra"]["sweeper"]["params"]["model.D"]).split(",")}
    D = compose([f"experiment={PRETRAIN}"], check=False).model.D
    assert declared == {D, *CANONICAL.ladder} and len(declared) >= 3


def test_each_rung_fine_tunes_from_its_own_pre_training_at_its_width(tmp_path):
    saves = {D: pretrain_job(QUICK, cache=tmp_path, D=D) for D in QUICK.ladder}
    keys = {job.meta["key"] for job, _ in saves.values()}
    assert len(keys) == len(QUICK.ladder)  # one cached pre-training per width
    for D, (job, _) in saves.items():
        assert f"model.D={D}" in job.argv and job.meta["D"] == D and job.name == f"pretrain-D{D}"
    jobs = finetune_jobs(QUICK, Path("/s16"), tmp_path, rungs={D: s for D, (_, s) in saves.items()})
    for D, (job, save) in saves.items():
        by = {j.meta["init"]: j for j in jobs if j.meta["target"].endswith(f"-D{D}")}
        pre, scratch = by["pretrained"], by["scratch"]
        assert f"train.init_from={save}" in pre.argv and pre.after == job.name
        assert pre.meta["D"] == scratch.meta["D"] == D and f"model.D={D}" in scratch.argv
        assert "data.per_class=100" in pre.argv  # the ladder's split: 100 labels per class
    assert len(jobs) == 2 * (len(QUICK.targets) + len(QUICK.ladder)) + len(QUICK.k_check)
