"""The same job under torchrun and as tasks of a submitit (SLURM) job, on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAST = [
    "pipeline.K=2",
    "pipeline.M=2",
    "train.steps=3",
    "train.warmup_steps=1",
    "logger=none",
    "model.hidden=32",
    "model.depth=2",
    "train.eval=false",
]
ENV = {**os.environ, "WANDB_MODE": "disabled", "GPIPE_PROGRESS": "0"}


@pytest.mark.slow
def test_torchrun_two_ranks(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    r = subprocess.run(
        [
            str(torchrun),
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "-m",
            "gpipe_repro.multinode",
            "--out",
            str(tmp_path),
            *FAST,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["status"] == "ok" and m["env"]["launcher"] == "torchrun"
    assert m["world_size"] == 2 and len(m["stages"]) == 2 and len(m["losses"]) == 3


@pytest.mark.slow
def test_submitit_local_one_task_per_rank(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpipe_repro",
            "-m",
            "hydra/launcher=submitit_local",
            "hydra.launcher.tasks_per_node=2",
            "hydra.launcher.timeout_min=5",
            f"hydra.sweep.dir={tmp_path}",
            *FAST,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads(next(tmp_path.glob("*/metrics.json")).read_text())
    assert m["status"] == "ok" and m["env"]["launcher"] == "submitit"
    assert len(m["stages"]) == 2
