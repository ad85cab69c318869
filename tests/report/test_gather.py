"""Gathering a sweep folder: every job a row (failed ones too), normalised throughput, canonical runs."""

import csv
import json

from gpipe_repro.report.callback import canonical
from gpipe_repro.report.gather import load_rows, write_report


def _job(folder, name, **m):
    (folder / name).mkdir()
    (folder / name / "metrics.json").write_text(json.dumps(m))


def test_rows_keep_failed_and_unreadable_jobs_and_normalise_to_the_smallest_cell(tmp_path):
    _job(
        tmp_path,
        "0_K1-M1",
        status="ok",
        source="measured",
        pipeline={"K": 1, "M": 1},
        throughput=100.0,
    )
    _job(
        tmp_path,
        "1_K2-M4",
        status="ok",
        source="simulated",
        pipeline={"K": 2, "M": 4},
        throughput=250.0,
    )
    _job(
        tmp_path,
        "2_K2-M3",
        status="failed",
        error="pipeline.M=3 does not divide",
        pipeline={"K": 2, "M": 3},
    )
    (tmp_path / "3_broken").mkdir()
    (tmp_path / "3_broken" / "metrics.json").write_text("{")
    rows = load_rows(tmp_path)
    assert len(rows) == 4
    by_job = {r["job"]: r for r in rows}
    assert (
        by_job["1_K2-M4"]["normalized_throughput"] == 2.5
        and by_job["1_K2-M4"]["source"] == "simulated"
    )
    assert (
        by_job["2_K2-M3"]["status"] == "failed" and "does not divide" in by_job["2_K2-M3"]["error"]
    )
    assert "unreadable metrics.json" in by_job["3_broken"]["error"]
    paths = write_report(rows, tmp_path, "t")
    assert len(list(csv.DictReader(paths["csv"].open()))) == 4


def test_only_the_make_targets_command_publishes_to_reports():
    assert canonical(["experiment=demo"], "demo")
    assert canonical(["experiment=demo", "logger=none"], "demo")
    assert not canonical(["experiment=demo", "train.steps=8"], "demo")
    assert not canonical(["experiment=table2", "pipeline.K=2"], "table2")
