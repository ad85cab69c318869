"""The same job under gpipe-torchrun and as the tasks of a SLURM job, on this machine, is gpipe-run's
run bit for bit (losses, evaluation, final weights); a submitit job runs one task per rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _shared import BIN, ENV, K2_RUN, ROOT, final_weights, same_tensors

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


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def assert_same_run(run: Path, reference: Path) -> None:
    """``run`` trained what ``reference`` (gpipe-run's own launch of ``K2_RUN``) trained: the same
    per-step losses, evaluation and final weights, bit for bit."""
    m, ref = metrics(run), metrics(reference)
    assert m["status"] == "ok" and len(m["stages"]) == 2 and m["world_size"] == 2
    assert m["losses"] == ref["losses"] and len(m["losses"]) == 4
    assert m["eval"] == ref["eval"]
    save = "saves/save-4"
    assert same_tensors(final_weights(run / save, K2_RUN), final_weights(reference / save, K2_RUN))


@pytest.mark.slow
def test_gpipe_torchrun_two_ranks_equal_gpipe_run(k2_run, tmp_path):
    r = subprocess.run(
        [
            str(BIN / "gpipe-torchrun"),
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--out",
            str(tmp_path),
            *K2_RUN,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert metrics(tmp_path)["env"]["launcher"] == "torchrun"
    assert_same_run(tmp_path, k2_run)


def slurm_task(rank: int, tasks: int, job_id: str) -> dict[str, str]:
    """What ``srun`` gives task ``rank`` of a one-node job of ``tasks`` tasks, as far as the code
    reads it (submitit's SLURM job environment, ``runner.cluster.task_env``)."""
    return {
        "SUBMITIT_EXECUTOR": "slurm",  # set by submitit's sbatch script
        "SLURM_JOB_ID": job_id,
        "SLURM_NTASKS": str(tasks),
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
    }


@pytest.mark.slow
def test_the_tasks_of_a_slurm_job_equal_gpipe_run(k2_run, tmp_path):
    """``srun`` emulated: two ``gpipe-run`` processes with a SLURM task's environment each, into
    one folder as submitit's tasks are (there is no SLURM here; the job's own submission is
    submitit's)."""
    job = str(os.getpid())
    tasks = [
        subprocess.Popen(
            [str(BIN / "gpipe-run"), *K2_RUN, f"hydra.run.dir={tmp_path}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**ENV, **slurm_task(rank, 2, job)},
            cwd=ROOT,
        )
        for rank in range(2)
    ]
    try:
        ends = [t.communicate(timeout=300) for t in tasks]
    finally:
        for t in tasks:
            if t.poll() is None:
                t.kill()
                t.communicate(timeout=30)
    for rank, (t, (_, err)) in enumerate(zip(tasks, ends, strict=True)):
        assert t.returncode == 0, (rank, err[-2000:])
    assert metrics(tmp_path)["env"]["launcher"] == "submitit"
    assert_same_run(tmp_path, k2_run)


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
