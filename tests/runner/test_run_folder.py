"""Nothing finished is ever replaced by something worse (issue #18 item 2): a run's folder, its saves
and its metrics.json against the ordinary commands that used to destroy them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.errors import UserError
from gpipe_repro.metrics.contract import RunMetrics
from gpipe_repro.metrics.writer import write_metrics
from gpipe_repro.runner import run
from gpipe_repro.save import latest

SMALL = [
    "model.hidden=16",
    "model.depth=2",
    "train.batch_size=16",
    "train.warmup_steps=1",
    "train.progress=false",
    "train.eval=false",
    "logger=none",
]


def _run(out: Path, *overrides: str):
    return run(compose([*SMALL, *overrides], cuda_available=False), out)


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def test_resuming_a_finished_run_is_a_no_op_that_keeps_its_results(tmp_path, capsys):
    first = _run(tmp_path, "train.steps=4", "train.save_every=2")
    assert first.status == "ok"
    before = (tmp_path / "metrics.json").read_text()
    again = _run(tmp_path, "train.steps=4", "train.save_every=2", "train.resume=auto")
    assert again.status == "ok" and again.losses == first.losses
    assert (tmp_path / "metrics.json").read_text() == before
    assert "already finished" in capsys.readouterr().err


@pytest.mark.parametrize("status", ["ok", "interrupted"])
def test_a_folder_holding_a_run_is_refused_without_resume(tmp_path, status):
    kept = RunMetrics(status=status, losses=[2.5, 2.25, 2.0])
    write_metrics(tmp_path, kept)
    before = (tmp_path / "metrics.json").read_text()
    with pytest.raises(UserError) as err:
        _run(tmp_path, "train.steps=2")
    msg = str(err.value)
    assert "\n" not in msg and str(tmp_path) in msg
    assert "train.resume=auto" in msg and "new folder" in msg and "train.overwrite=true" in msg
    assert (tmp_path / "metrics.json").read_text() == before


def test_overwrite_replaces_the_folders_run(tmp_path):
    write_metrics(tmp_path, RunMetrics(status="ok", losses=[2.5, 2.25, 2.0]))
    m = _run(tmp_path, "train.steps=2", "train.overwrite=true")
    assert m.status == "ok" and len(_metrics(tmp_path)["losses"]) == 2


def test_a_failed_attempt_never_replaces_metrics_with_more_losses(tmp_path):
    assert _run(tmp_path, "train.steps=6", "train.save_every=2").status == "ok"
    # continue to 10 steps, but with a config that fails before any step runs
    bad = _run(
        tmp_path, "train.steps=10", "train.save_every=2", "train.resume=auto", "pipeline.K=5"
    )
    assert bad.status == "failed"
    kept = _metrics(tmp_path)
    assert kept["status"] == "ok" and len(kept["losses"]) == 6


def test_keep_one_never_prunes_the_new_runs_save_for_an_old_runs_later_one(tmp_path):
    saves = tmp_path / "saves"
    old = _run(tmp_path / "a", "train.steps=6", "train.save_every=3", f"train.save_dir={saves}")
    new = _run(
        tmp_path / "b",
        "seed=1",
        "train.steps=4",
        "train.save_every=2",
        "train.save_keep=1",
        f"train.save_dir={saves}",
    )
    assert old.status == new.status == "ok"
    assert (saves / "save-6").is_dir()  # the other run's saves are not this run's to prune
    mine = saves / "save-4"
    assert mine.is_dir(), sorted(p.name for p in saves.iterdir())
    assert json.loads((mine / "save.json").read_text())["losses"] == new.losses


def test_resume_auto_never_picks_an_old_runs_save(tmp_path):
    saves = tmp_path / "saves"
    _run(tmp_path / "a", "train.steps=6", "train.save_every=3", f"train.save_dir={saves}")
    b = tmp_path / "b"
    common = ["seed=1", "train.save_every=2", f"train.save_dir={saves}"]
    short = _run(b, *common, "train.steps=4")
    assert latest(saves) is not None
    longer = _run(b, *common, "train.steps=5", "train.resume=auto")
    assert longer.status == "ok", longer.error
    assert longer.losses[:4] == short.losses and len(longer.losses) == 5
