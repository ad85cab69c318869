"""gpipe-run end to end: real ranks, real files, and one-line errors for bad input."""

from __future__ import annotations

import csv
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from _shared import gpipe_run

FAST = [
    "train.steps=4",
    "train.warmup_steps=1",
    "train.eval_batch_size=500",
    "logger=none",
    "model.hidden=64",
    "model.depth=3",
]
CONTRACT = [
    "status",
    "source",
    "error",
    "model",
    "pipeline",
    "batch_size",
    "steps",
    "seed",
    "device",
    "world_size",
    "losses",
    "step_time_s",
    "warmup_steps",
    "throughput",
    "bubble_fraction",
    "stages",
    "eval",
    "env",
]
STAGE_KEYS = [
    "layers",
    "param_count",
    "param_bytes",
    "optimizer_bytes",
    "activation_bytes",
    "peak_memory_bytes",
    "memory_source",
    "busy_s",
]


def test_two_stage_run_writes_complete_metrics(k2_run):
    """The session's K = 2 run through gpipe-run (tests/conftest.py: K2_RUN)."""
    tmp_path = k2_run
    m = json.loads((tmp_path / "metrics.json").read_text())
    for key in CONTRACT:
        assert key in m, key
    assert m["status"] == "ok" and m["error"] is None and m["source"] == "measured"
    assert m["pipeline"]["K"] == 2 and m["pipeline"]["M"] == 4 and m["world_size"] == 2
    assert sum(m["pipeline"]["balance"]) == 3 + 2 and len(m["pipeline"]["balance"]) == 2
    assert len(m["losses"]) == 4 and all(isinstance(x, float) for x in m["losses"])
    assert len(m["stages"]) == 2
    for st in m["stages"]:
        for key in STAGE_KEYS:
            assert key in st, key
        assert st["memory_source"] == "accounted"
        assert st["activation_bytes"] > 0 and st["busy_s"] > 0
        assert st["optimizer_bytes"] == st["param_bytes"]  # RMSProp: one running average
    assert m["model"]["param_count"] == sum(s["param_count"] for s in m["stages"])
    assert 0 <= m["bubble_fraction"] < 1 and m["throughput"] > 0
    correct = m["eval"]["accuracy"] * m["eval"]["samples"]  # a share of the samples evaluated
    assert m["eval"]["samples"] > 0 and correct == pytest.approx(round(correct), abs=1e-6)
    if (
        platform.libc_ver()[0] == "glibc"
    ):  # CPU ranks keep freed memory (pipeline.host_memory=retain)
        assert m["env"]["host_memory"] == ["retain"]
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}
    assert (tmp_path / "timeline.png").stat().st_size > 1000
    assert (tmp_path / "saves" / "save-4" / "COMPLETE").exists()  # the final save


def test_multirun_gathers_every_job_failed_ones_too(tmp_path):
    r = gpipe_run("-m", "pipeline.K=1,2", "pipeline.M=2,3", *FAST, f"hydra.sweep.dir={tmp_path}")
    assert r.returncode == 1  # two jobs failed (M=3 does not divide 64) ...
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert len(rows) == 4  # ... but all four were gathered
    ok = {(row["K"], row["M"]) for row in rows if row["status"] == "ok"}
    assert ok == {("1", "2"), ("2", "2")}
    failed = [row for row in rows if row["status"] == "failed"]
    assert all("pipeline.M=3 does not divide train.batch_size=64" in row["error"] for row in failed)
    assert (tmp_path / "results.md").read_text().count("\n| ") >= 5
    assert (tmp_path / "results.png").stat().st_size > 1000


def _records(run_dir: Path) -> list[dict]:
    """The records of an offline wandb run, read back with wandb's own reader."""
    wandb_cli = Path(sys.executable).with_name("wandb")
    r = subprocess.run(
        [str(wandb_cli), "leet", "inspect", "--json", str(next(run_dir.glob("*.wandb")))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_wandb_offline_run_has_a_live_history_and_the_timeline(tmp_path):
    steps = 40
    r = gpipe_run(
        "pipeline.K=1",
        *[a for a in FAST if a not in ("logger=none", "train.steps=4")],
        "logger=wandb",
        f"train.steps={steps}",
        f"hydra.run.dir={tmp_path}",
        env={"WANDB_MODE": "offline"},
    )
    assert r.returncode == 0, r.stderr
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    recs = _records(runs[0])
    history = [x["history"]["item"] for x in recs if x["type"] == "history"]
    steps_logged = [h for h in history if "loss" in h]
    assert [h["_step"] for h in steps_logged] == list(range(steps))
    assert {"loss", "step_time_s", "samples_per_s"} <= set(steps_logged[0])
    # live: logged as the run went, not back-filled at the end — the first step's record was written
    # while later steps were still running
    m = json.loads((tmp_path / "metrics.json").read_text())
    first, last = steps_logged[0]["_timestamp"], steps_logged[-1]["_timestamp"]
    assert last - first > 0.3 * sum(m["step_times_s"][1:]), (first, last)
    assert any(k.startswith("timeline.") for h in history for k in h)  # the timeline image
    assert list(runs[0].glob("files/media/images/timeline_*.png"))
    assert any(x["type"] == "artifact" for x in recs)  # trace.json + metrics.json
