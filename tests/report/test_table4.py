"""report.table4's command line: only the canonical table publishes; mistakes are one line."""

from __future__ import annotations

from gpipe_repro.report.table4 import main


def test_the_quick_variant_never_publishes(tmp_path, capsys):
    dest = tmp_path / "reports" / "table4"
    assert main(["--quick", "--publish", str(dest), "--work", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("table4: error: --publish") and "make table4" in err and "\n" not in err
    assert not dest.exists() and not (tmp_path / "w").exists()


def test_report_only_needs_a_work_folder_and_jobs_must_be_positive(tmp_path, capsys):
    assert main(["--report-only", "--work", str(tmp_path / "none")]) == 2
    assert "plan.json not found" in capsys.readouterr().err
    assert main(["--jobs", "0", "--work", str(tmp_path / "w")]) == 2
    assert "--jobs=0 must be >= 1" in capsys.readouterr().err
