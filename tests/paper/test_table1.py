"""Table 1's artefact on a subset of columns: files, columns, the page from the CSV, bad input."""

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpipe_repro.memory.table1 import COLUMNS, largest, plan_column
from gpipe_repro.paper.__main__ import main

REPORT = Path(__file__).resolve().parents[2] / "reports" / "table1"


def test_transformer_columns_report(tmp_path):
    assert (
        main(
            [
                "table1",
                "--out",
                str(tmp_path),
                "--columns",
                "transformer:Naive-1",
                "transformer:Pipeline-8",
            ]
        )
        == 0
    )
    every = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [(r["column"], r["precision"], r["accounting"]) for r in every] == [
        (c, p, a)
        for c in ("Naive-1", "Pipeline-8")
        for a in ("eager", "xla-like")
        for p in ("fp32", "bf16")
    ]
    rows = [r for r in every if r["accounting"] == "eager"]
    xla = {
        r["precision"]: r
        for r in every
        if r["accounting"] == "xla-like" and r["column"] == "Naive-1"
    }
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
    # the XLA-like accounting keeps less, and a larger Naive-1 fits
    for p in ("fp32", "bf16"):
        assert int(xla[p]["activation_bytes"]) < int(naive[p]["activation_bytes"])
        assert int(xla[p]["largest_L"]) >= int(naive[p]["largest_L"])
    for p8 in (r for r in every if r["column"] == "Pipeline-8"):
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
    assert "| column | ours (planned): precision, accounting | L |" in md
    assert "| Naive-1 | bf16 | 3 |" in md and "| Naive-1 | fp32, XLA-like | 3 |" in md
    assert (
        "bf16 closes" in md
        and "What remains in bf16" in md
        and "## Where and why ours differ" in md
    )
    # the paper's headline ratios, quoted through studies.published (printed and from its table); ours
    # need Pipeline-128, not planned in this subset (judged: test_the_headline_ratios_are_judged)
    (ratio,) = [x for x in md.splitlines() if x.startswith("| 128 partitions: transformer_lm")]
    assert ratio.endswith("| 298× | 297.3× |")
    # the page opens with its verdicts: the claims of paper.claims.table1
    after = md.split("\n# Table 1")[-1].split("\n\n")  # after the title (and any warning)
    assert after[1].startswith("The paper's claims this page judges"), after[:2]
    # one unit: GiB, never 10^9-byte "G" figures
    assert "GiB" in md and not re.search(r"\d\.\d\dG\b", md)
    # the allocator check: every stage of K = 1 and 2, remat never and always, within 15%
    alloc = list(csv.DictReader((tmp_path / "allocator.csv").open()))
    assert {(r["K"], r["stage"], r["checkpoint"]) for r in alloc} == {
        (k, s, c) for k, s in (("1", "0"), ("2", "0"), ("2", "1")) for c in ("never", "always")
    }
    assert all(abs(float(r["error"])) < 0.15 for r in alloc), alloc
    assert "## The planner against the allocator" in md
    # the XLA-like accounting mode is labelled and keeps less than eager accounting
    row = next(x for x in md.splitlines() if x.startswith("| transformer_lm | fp32 | "))
    cells = [c.strip() for c in row.split("|")]
    eager, xla_ = (float(cells[i].removesuffix(" GiB")) for i in (3, 5))
    assert xla_ < eager and "XLA-like accounting (a labelled estimate" in md
    assert (tmp_path / "table1.png").stat().st_size > 1000
    again = tmp_path / "again"  # the page is a function of the csv files (and its provenance)
    assert main(["table1", "--from", str(tmp_path / "results.csv"), "--out", str(again)]) == 0
    body = lambda t: [x for x in t.splitlines() if not x.startswith("Generated by")]  # noqa: E731
    assert body((again / "table1.md").read_text()) == body(md)
    assert (again / "saved.csv").read_bytes() == (tmp_path / "saved.csv").read_bytes()
    assert (again / "allocator.csv").read_bytes() == (tmp_path / "allocator.csv").read_bytes()
    assert (again / "results.csv").read_bytes() == (tmp_path / "results.csv").read_bytes()
    assert "re-rendered from" in (again / "table1.md").read_text()


def test_a_budget_too_small_names_the_layer(tmp_path, monkeypatch):
    # the allocator check's rows (allocator.csv, the same whatever the columns; 20 s of AmoebaNet
    # steps) are not what this test reads: the check itself is tests/memory/test_allocator.py's,
    # its rows in the report test_transformer_columns_report's
    import gpipe_repro.paper.table1 as table1

    monkeypatch.setattr(table1, "alloc_rows", lambda: [])
    main(
        [
            "table1",
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
        [sys.executable, "-m", "gpipe_repro.paper", "table1", "--amoebanet-budget-gib", "-1"],
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
    code = main(
        [
            "table1",
            "--out",
            "reports/table1",
            "--transformer-budget-gib",
            "80",
            "--columns",
            "transformer:Pipeline-8",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "only `make table1` writes" in err and "outputs/table1/transformer_budget_gib-80" in err
    assert main(["table1", "--publish", "--transformer-budget-gib", "80"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "table1: error: --publish is for `make table1` alone; this run changes transformer budget gib-80"
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("label", ["Naive-1", "Pipeline-1"])
def test_the_largest_transformer_that_fits_is_maximal(label, precision):
    """Table 1's "largest model that fits": it fits, and one layer more does not (the search's upper
    bound, 8,192 layers, is not what stopped it)."""
    column = next(c for c in COLUMNS if c.model == "transformer_lm" and c.label == label)
    found = largest(column, precision)
    assert found is not None
    (L, _), plan = found
    assert plan.fits and plan_column(column, (L, 0), precision).fits
    assert not plan_column(column, (L + 1, 0), precision).fits, (label, precision, L)
    assert L < 8192


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("label", ["Naive-1", "Pipeline-1"])
def test_the_largest_amoebanet_that_fits_is_maximal(label, precision):
    """Table 1's AmoebaNet columns as published (reports/table1: the largest D, a multiple of 8, at
    the paper's L): that size fits, and the next size up, D + 8, does not. Two meta-device plans a
    cell instead of the search's ~11 (the search itself: the Transformer test above); still ~10 s
    a cell on a shared machine: ``long`` (tests/conftest.py)."""
    column = next(c for c in COLUMNS if c.model == "amoebanet_d" and c.label == label)
    rows = csv.DictReader((REPORT / "results.csv").open())
    row = next(r for r in rows if (r["column"], r["precision"]) == (label, precision))
    L, D = int(row["largest_L"]), int(row["largest_D"])
    assert row["model"] == "amoebanet_d" and L == column.size[0] and D % 8 == 0
    found = plan_column(column, (L, D), precision)
    assert found.fits and max(found.totals) == int(row["largest_max_stage_total_bytes"])
    assert not plan_column(column, (L, D + 8), precision).fits, (label, precision, D)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_xla_like_accounting_drops_exactly_the_groups_the_breakdown_names(precision):
    """The planner's XLA-like Naive-1 (``memory.table1``) and the saved tensors' breakdown without
    ``FUSED_AWAY``'s groups (``memory.breakdown``, the page's table) are the same bytes."""
    from gpipe_repro.memory.breakdown import fused_away, transformer_groups

    column = next(c for c in COLUMNS if c.model == "transformer_lm" and c.label == "Naive-1")
    eager = plan_column(column, precision=precision)
    xla = plan_column(column, precision=precision, accounting="xla-like")
    groups = transformer_groups(column.size[0], column.batch, precision)
    dropped = sum(g.nbytes for g in groups if fused_away(g.kind, g.dtype))
    assert dropped > 0
    assert sum(eager.activation) - sum(xla.activation) == pytest.approx(dropped, rel=1e-6)
    with pytest.raises(ValueError, match="accounting='fused'; allowed: eager, xla-like"):
        plan_column(column, precision=precision, accounting="fused")


def test_the_headline_ratios_are_judged_per_accounting(tmp_path):
    """§3's ratios the way the paper computed them (largest over Naive-1's largest), ours per
    precision and accounting, each with the rule's verdict against the printed ratio, on the page."""
    from dataclasses import replace

    from gpipe_repro.paper.table1.findings import ratios
    from gpipe_repro.studies.table1 import ResultRow
    from gpipe_repro.typed_csv import read_csv, write_csv

    rows = [r for r in read_csv(REPORT / "results.csv", ResultRow) if r.model == "transformer_lm"]
    # an XLA-like Naive-1 that holds the paper's 282.2M: the ratio becomes the paper's
    top = next(r for r in rows if r.column == "Pipeline-128" and r.precision == "fp32")
    naive = next(r for r in rows if r.column == "Naive-1" and r.precision == "fp32")
    xla = [
        replace(top, accounting="xla-like"),
        replace(
            naive, accounting="xla-like", largest_param_count=round(top.largest_param_count / 298)
        ),
    ]
    (r,) = [x for x in ratios(rows + xla) if x.note == "128 partitions"]
    assert r.printed == 298 and r.ours[("fp32", "xla-like")] == pytest.approx(298, rel=1e-3)
    src = tmp_path / "src"
    src.mkdir()
    write_csv(src / "results.csv", ResultRow, rows + xla)
    for sibling in ("saved.csv", "allocator.csv"):
        shutil.copy(REPORT / sibling, src / sibling)
    assert main(["table1", "--from", str(src / "results.csv"), "--out", str(tmp_path / "out")]) == 0
    lines = (tmp_path / "out" / "table1.md").read_text().splitlines()
    head = next(x for x in lines if x.startswith("| ratio | paper, printed |"))
    (row,) = [x for x in lines if x.startswith("| 128 partitions")]
    cells = lambda line: [c.strip() for c in line.strip("|").split("|")]  # noqa: E731
    by = dict(zip(cells(head), cells(row)))
    assert by["ours, fp32, XLA-like"].endswith("(reproduced (simulated only))")
    assert by["ours, fp32"].endswith("(not reproduced)")  # eager: Naive-1 holds far less
