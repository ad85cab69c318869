"""``make table1``'s command on a subset of columns: files, columns, and bad input."""

import csv
import subprocess
import sys

import pytest

from gpipe_repro.planner.report import main


def test_transformer_columns_report(tmp_path):
    main(["--out", str(tmp_path), "--columns", "transformer:Naive-1", "transformer:Pipeline-8"])
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [r["column"] for r in rows] == ["Naive-1", "Pipeline-8"]
    for key in ("model", "K", "param_count", "paper_param_count", "activation_bytes", "paper_activation_bytes", "fits"):
        assert all(r[key] != "" for r in rows), key
    p8 = rows[1]
    assert p8["fits"] == "True" and int(p8["largest_L"]) >= 103  # GPipe's Pipeline-8 claim holds
    assert abs(int(p8["param_count"]) / int(p8["paper_param_count"]) - 1) < 0.005
    md = (tmp_path / "table1.md").read_text()
    assert "| parameters: ours (paper, ratio) |" in md and "## Where and why ours differ" in md
    assert (tmp_path / "table1.png").stat().st_size > 1000
    (tmp_path / "table1.md").unlink()
    main(["--out", str(tmp_path), "--from-csv"])  # the table is a function of the csv
    assert (tmp_path / "table1.md").read_text() == md


def test_a_budget_too_small_names_the_layer(tmp_path):
    main(["--out", str(tmp_path), "--columns", "transformer:Pipeline-1", "--transformer-budget-gib", "0.25"])
    row = next(csv.DictReader((tmp_path / "results.csv").open()))
    assert row["fits"] == "False" and row["largest_L"] == ""
    assert "layer 0 (Embed) alone needs" in row["note"]


def test_bad_arguments_are_one_line():
    r = subprocess.run([sys.executable, "-m", "gpipe_repro.planner.report", "--amoebanet-budget-gib", "-1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == "table1: error: --amoebanet-budget-gib=-1.0 is invalid; allowed: a number of GiB > 0"


def test_only_the_paper_setting_writes_the_committed_report(capsys):
    from gpipe_repro.planner.report import main

    with pytest.raises(SystemExit) as e:
        main(["--out", "reports/table1", "--transformer-budget-gib", "80", "--columns", "transformer:Pipeline-8"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "is the committed report of `make table1`" in err and "outputs/table1/transformer_budget_gib-80" in err
