"""Table 4's command line: only the canonical table publishes; mistakes are one line."""

from __future__ import annotations

import pytest

from gpipe_repro.paper.__main__ import main
from gpipe_repro.paper.stats import BEYOND, INSIDE, UNTESTABLE


def test_the_quick_variant_never_publishes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["table4", "--quick", "--publish"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("table4: error: --publish") and "make table4" in err and "\n" not in err
    assert not any(tmp_path.iterdir())


def test_a_report_needs_a_work_folder_and_jobs_must_be_positive(tmp_path, capsys):
    assert main(["table4", "--from", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "w").mkdir()
    assert main(["table4", "--from", str(tmp_path / "w"), "--out", str(tmp_path / "o")]) == 1
    assert "plan.json not found" in capsys.readouterr().err
    assert main(["table4", "--jobs", "0", "--out", str(tmp_path / "w")]) == 2
    assert "--jobs=0 must be >= 1" in capsys.readouterr().err


@pytest.mark.target
@pytest.mark.timeout(600)
def test_the_quick_variant_runs_the_capacity_ladder_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_CACHE", str(tmp_path / "cache"))  # its own pre-trainings
    out = tmp_path / "out"
    assert main(["table4", "--quick", "--out", str(out)]) == 0
    md = (out / "table4.md").read_text()
    ladder = md.split("## Capacity ladder")[1].split("\n## ")[0]
    rows = [x for x in ladder.splitlines() if x.startswith("| ") and x[2].isdigit()]
    assert [int(x.split("|")[1]) for x in rows] == [8, 16, 32]
    for row in rows:  # each rung's own pre-training, and a verdict by the rule
        assert row.split("|")[2].strip() != "—"
        assert any(v in row for v in (BEYOND, INSIDE, UNTESTABLE)), row
    n = len(list((out / "jobs").glob("*/s*/metrics.json")))
    assert f"{n}/{n} fine-tuning runs ok" in md and "min (wall, measured)" in md
