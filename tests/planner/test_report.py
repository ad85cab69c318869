"""``make table1``'s command on a subset of columns: files, columns, and bad input."""

import csv
import subprocess
import sys

import pytest

from gpipe_repro.planner.report import main


def test_transformer_columns_report(tmp_path):
    main(["--out", str(tmp_path), "--columns", "transformer:Naive-1", "transformer:Pipeline-8"])
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [(r["column"], r["precision"]) for r in rows] == [
        ("Naive-1", "fp32"),
        ("Naive-1", "bf16"),
        ("Pipeline-8", "fp32"),
        ("Pipeline-8", "bf16"),
    ]
    for key in (
        "model",
        "K",
        "param_count",
        "paper_param_count",
        "activation_bytes",
        "paper_activation_bytes",
        "fits",
    ):
        assert all(r[key] != "" for r in rows), key
    naive = {r["precision"]: r for r in rows if r["column"] == "Naive-1"}
    # bf16 shrinks Naive-1's activations, but not below half: the loss's log-probabilities stay fp32
    assert (
        int(naive["fp32"]["activation_bytes"]) / 2
        < int(naive["bf16"]["activation_bytes"])
        < int(naive["fp32"]["activation_bytes"])
    )
    assert int(naive["fp32"]["weight_copy_bytes"]) == 0 < int(naive["bf16"]["weight_copy_bytes"])
    for p8 in rows[2:]:
        assert (
            p8["fits"] == "True" and int(p8["largest_L"]) >= 103
        )  # GPipe's Pipeline-8 claim holds
        assert abs(int(p8["param_count"]) / int(p8["paper_param_count"]) - 1) < 0.005
    saved = list(csv.DictReader((tmp_path / "saved.csv").open()))
    assert {(r["column"], r["precision"]) for r in saved} == {
        ("Naive-1", "fp32"),
        ("Naive-1", "bf16"),
    }
    for precision in (
        "fp32",
        "bf16",
    ):  # the breakdown accounts for every byte of the plan's activations
        total = sum(int(r["bytes"]) for r in saved if r["precision"] == precision)
        assert total == pytest.approx(int(naive[precision]["activation_bytes"]), rel=1e-6)
    md = (tmp_path / "table1.md").read_text()
    assert "| column | precision | L |" in md and "| Naive-1 | bf16 | 3 |" in md
    assert (
        "bf16 closes" in md
        and "What remains in bf16" in md
        and "## Where and why ours differ" in md
    )
    assert (tmp_path / "table1.png").stat().st_size > 1000
    (tmp_path / "table1.md").unlink()
    main(["--out", str(tmp_path), "--from-csv"])  # the table is a function of the csv
    assert (tmp_path / "table1.md").read_text() == md


def test_a_budget_too_small_names_the_layer(tmp_path):
    main(
        [
            "--out",
            str(tmp_path),
            "--columns",
            "transformer:Pipeline-1",
            "--transformer-budget-gib",
            "0.25",
        ]
    )
    row = next(csv.DictReader((tmp_path / "results.csv").open()))
    assert row["fits"] == "False" and row["largest_L"] == ""
    assert "layer 0 (Embed) alone needs" in row["note"]


def test_bad_arguments_are_one_line():
    r = subprocess.run(
        [sys.executable, "-m", "gpipe_repro.planner.report", "--amoebanet-budget-gib", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        == "table1: error: --amoebanet-budget-gib=-1.0 is invalid; allowed: a number of GiB > 0"
    )


def test_only_the_paper_setting_writes_the_committed_report(capsys):
    from gpipe_repro.planner.report import main

    with pytest.raises(SystemExit) as e:
        main(
            [
                "--out",
                "reports/table1",
                "--transformer-budget-gib",
                "80",
                "--columns",
                "transformer:Pipeline-8",
            ]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert (
        "is the committed report of `make table1`" in err
        and "outputs/table1/transformer_budget_gib-80" in err
    )
