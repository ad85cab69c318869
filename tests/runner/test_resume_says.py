"""What a resume does, said in one line and recorded (issue #36 finding 6): resumed from a save at a
step, started fresh, or fell back from a corrupt save — which is kept, never overwritten unsaid; a
save made with another batch size, data order or model is refused in one line naming both values,
unless ``train.resume_allow`` lists it, and then ``metrics.json`` records what differed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.errors import UserError
from gpipe_repro.runner import run

SMALL = [
    "model.hidden=16",
    "model.depth=2",
    "train.batch_size=16",
    "train.warmup_steps=1",
    "train.progress=false",
    "train.eval=false",
    "train.save_every=2",
    "logger=none",
]


def _run(out: Path, *overrides: str):
    return run(compose([*SMALL, *overrides], cuda_available=False), out)


def _said(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if "resume:" in ln]


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def test_a_resume_says_from_which_save_and_step_and_records_it(tmp_path, capsys):
    first = _run(tmp_path, "train.steps=4")
    capsys.readouterr()
    again = _run(tmp_path, "train.steps=6", "train.resume=auto")
    assert again.status == "ok" and again.losses[:4] == first.losses
    (line,) = _said(capsys)
    assert f"resumed from save-4 at step 4 of 6 ({tmp_path / 'saves' / 'save-4'})" in line
    assert _metrics(tmp_path)["resume"] == {
        "save": str(tmp_path / "saves" / "save-4"),
        "step": 4,
        "corrupt": [],
        "allowed": {},
    }


def test_a_resume_with_nothing_saved_says_it_started_fresh(tmp_path, capsys):
    assert _run(tmp_path, "train.steps=2", "train.resume=auto").status == "ok"
    (line,) = _said(capsys)
    assert f"no intact save of this run in {tmp_path / 'saves'}: started fresh" in line
    assert _metrics(tmp_path)["resume"]["save"] is None


def test_a_corrupt_newest_save_is_named_kept_and_the_run_falls_back(tmp_path, capsys):
    first = _run(tmp_path, "train.steps=4")
    saves = tmp_path / "saves"
    (saves / "save-4" / "save.json").write_text("{")  # the newest save's record, corrupt
    capsys.readouterr()
    again = _run(tmp_path, "train.steps=6", "train.resume=auto")
    assert again.status == "ok" and again.losses[:4] == first.losses  # steps 3-4 run again
    (line,) = _said(capsys)
    assert f"{saves / 'save-4'} is corrupt" in line and "save.json" in line
    assert "fell back: resumed from save-2 at step 2 of 6" in line
    (kept,) = saves.glob("save-4.corrupt-*")  # not overwritten by this run's own save-4
    assert kept.name in line and (kept / "save.json").read_text() == "{"
    assert json.loads((saves / "save-4" / "save.json").read_text())["step"] == 4
    rec = _metrics(tmp_path)["resume"]
    assert rec["step"] == 2 and len(rec["corrupt"]) == 1 and kept.name in rec["corrupt"][0]


@pytest.mark.parametrize(
    "change,allow,named",
    [
        ("train.batch_size=32", "batch_size", "train.batch_size=16 (this run: 32)"),
        ("seed=1", "data", "seed=0 (this run: 1)"),
        ("model.dropout=0.5", "model", "model.dropout=0.1 (this run: 0.5)"),
    ],
)
def test_a_resume_that_changes_the_batch_data_or_model_is_refused_unless_allowed(
    tmp_path, capsys, change, allow, named
):
    assert _run(tmp_path, "train.steps=4").status == "ok"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(UserError) as err:  # nothing run, nothing written
        _run(tmp_path, "train.steps=6", "train.resume=auto", change)
    msg = str(err.value)
    assert "\n" not in msg and named in msg and f"train.resume_allow=[{allow}]" in msg
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    allowed = _run(
        tmp_path, "train.steps=6", "train.resume=auto", change, f"train.resume_allow=[{allow}]"
    )
    assert allowed.status == "ok", allowed.error
    rec = _metrics(tmp_path)["resume"]["allowed"]
    assert rec and all(len(v) == 2 and v[0] != v[1] for v in rec.values()), rec
    assert f"allowed by train.resume_allow: {named.split(' (')[0]}" in _said(capsys)[-1]


def test_resume_allow_takes_only_what_it_names():
    with pytest.raises(UserError, match=r"train.resume_allow=\['steps'\] has 'steps'; allowed"):
        compose([*SMALL, "train.resume_allow=[steps]"], cuda_available=False)
