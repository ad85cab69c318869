"""Table 4's command line: only the canonical table publishes; mistakes are one line."""

from __future__ import annotations

from gpipe_repro.paper.__main__ import main


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
