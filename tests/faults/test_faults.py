"""The fault matrix (issue #11): real processes, each fault injected, each bounded in time.

For every fault: how long until the run ends, what the user reads (a few lines, naming the cause),
which files are written (metrics.json with what was measured, a save when saves are on) and that
nothing is lost or left running.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from _shared import (
    ROOT,
    final_weights,
    finish,
    group_left,
    same_tensors,
    start,
    steps_done,
    wait_for,
)

from gpipe_repro.config.compose import compose
from gpipe_repro.runner import run as run_here

MLP = ["model.hidden=64", "model.depth=3", "logger=none", "train.eval=false"]


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("[")]


def metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def pid_of(run: Path, rank: int) -> int:
    return int((run / ".heartbeat" / f"rank-{rank}").read_text())


def no_rank_left(run_pids: list[int]) -> bool:
    return all(
        not Path(f"/proc/{p}").exists() or "zombie" in Path(f"/proc/{p}/status").read_text().lower()
        for p in run_pids
    )


@pytest.mark.slow
def test_sigkill_of_a_rank_ends_the_run_and_names_it(tmp_path):
    run = tmp_path / "run"
    proc = start(["pipeline.K=2", "train.steps=100000", *MLP, f"hydra.run.dir={run}"], tmp_path)
    wait_for(lambda: steps_done(run) >= 5, 120, "training to start")
    victim = pid_of(run, 1)
    os.kill(victim, signal.SIGKILL)
    code, err, took = finish(proc, 30)
    assert code == 1 and took < 30
    assert len(lines(err)) == 1 and "rank 1: killed by signal 9 (SIGKILL)" in err, err
    m = metrics(run)
    assert m["status"] == "failed" and "rank 1" in m["error"] and len(m["losses"]) >= 5
    assert no_rank_left([victim, pid_of(run, 0)] if (run / ".heartbeat").exists() else [victim])


@pytest.mark.slow
def test_a_stopped_rank_is_named_in_seconds_not_minutes(tmp_path):
    run = tmp_path / "run"
    proc = start(
        [
            "pipeline.K=2",
            "train.steps=100000",
            "pipeline.heartbeat_s=3",
            *MLP,
            f"hydra.run.dir={run}",
        ],
        tmp_path,
    )
    wait_for(lambda: steps_done(run) >= 5, 120, "training to start")
    victim = pid_of(run, 1)
    os.kill(victim, signal.SIGSTOP)
    code, err, took = finish(proc, 30)
    assert code == 1 and took < 20, took
    assert (
        "rank 1 (stage 1, replica 0) stopped responding: no heartbeat for" in err
        and len(lines(err)) == 1
    ), err
    assert "rank 1" in metrics(run)["error"]


def _losses(run: Path) -> list[float]:
    return metrics(run)["losses"]


@pytest.mark.slow
def test_ctrl_c_stops_a_k2_run_after_the_step_and_resume_is_bit_identical_at_any_k(tmp_path):
    args = [
        "pipeline.K=2",
        "pipeline.M=2",
        "train.steps=40",
        *MLP,
        "model.dropout=0.2",
        "train.save_every=1000",  # a save when stopped, and at the end
    ]
    k1 = [*[a for a in args if a != "pipeline.K=2"], "pipeline.K=1"]
    # the uninterrupted run, at K = 1 in this process (the losses are K's alike: tests/engine)
    full = tmp_path / "full"
    assert run_here(compose(k1, cuda_available=False), full).status == "ok"
    run = tmp_path / "run"
    proc = start([*args, f"hydra.run.dir={run}"], tmp_path)
    wait_for(lambda: steps_done(run) >= 8, 120, "training to start")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole process group
    code, err, took = finish(proc, 60)
    assert code == 130 and took < 60, (code, err)
    assert len(lines(err)) <= 3 and "stopping after the current step" in err, err
    wait_for(lambda: not group_left(proc.pid), 10, "the run's processes to be gone")
    m = metrics(run)
    done = len(m["losses"])
    assert m["status"] == "interrupted" and 8 <= done < 40
    save = run / "saves" / f"save-{done}"
    assert (save / "COMPLETE").exists()  # a save when saves are on
    assert m["losses"] == _losses(full)[:done]
    final = final_weights(full / "saves" / "save-40", k1)
    # resume at another K (K = 1, from that save, in a folder of its own) ...
    other = tmp_path / "other"
    resumed = run_here(compose([*k1, f"train.resume={save}"], cuda_available=False), other)
    assert resumed.status == "ok", resumed.error
    assert _losses(other) == _losses(full) and same_tensors(
        final_weights(other / "saves" / "save-40", k1), final
    )
    # ... and through gpipe-run in the same folder at the same K: the per-step losses and the final
    # parameters of the whole run equal the uninterrupted run's, bit for bit
    code, err, _ = finish(
        start([*args, f"hydra.run.dir={run}", "train.resume=auto"], tmp_path), 300
    )
    assert code == 0, err
    assert _losses(run) == _losses(full)
    assert same_tensors(final_weights(run / "saves" / "save-40", args), final)


@pytest.mark.slow
def test_a_second_signal_stops_at_once_and_leaves_no_rank(tmp_path):
    run = tmp_path / "run"
    proc = start(["pipeline.K=2", "train.steps=100000", *MLP, f"hydra.run.dir={run}"], tmp_path)
    wait_for(lambda: steps_done(run) >= 5, 120, "training to start")
    pids = [pid_of(run, 0), pid_of(run, 1)]
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    code, err, took = finish(proc, 30)
    assert code == 130 and took < 30, (code, err)
    assert len(lines(err)) <= 4, err
    assert metrics(run)["status"] == "interrupted"
    wait_for(lambda: no_rank_left(pids), 10, "the ranks to be gone")


@pytest.mark.slow
def test_sigint_of_a_one_process_run(tmp_path):
    run = tmp_path / "run"
    proc = start(["pipeline.K=1", "train.steps=100000", *MLP, f"hydra.run.dir={run}"], tmp_path)
    wait_for(lambda: steps_done(run) >= 5, 120, "training to start")
    proc.send_signal(signal.SIGINT)
    code, err, took = finish(proc, 30)
    assert code == 130 and "Traceback" not in err and len(lines(err)) <= 3, err
    m = metrics(run)
    assert (
        m["status"] == "interrupted"
        and len(m["losses"]) >= 5
        and len(m["step_times_s"]) == len(m["losses"])
    )


def _readme_sweep_resume(folder: Path) -> list[str]:
    """The overrides README.md gives to finish an interrupted sweep, as it writes them, with its
    ``<its folder>`` filled in."""
    text = " ".join((ROOT / "README.md").read_text().split())
    found = re.search(r"To finish an interrupted sweep: the same command with `([^`]+)`", text)
    assert found, "README.md no longer says how to finish an interrupted sweep"
    recipe = found.group(1)
    assert "<its folder>" in recipe, recipe
    return recipe.replace("<its folder>", str(folder)).split()


@pytest.mark.slow
def test_ctrl_c_stops_a_sweep_and_the_readme_recipe_finishes_it(tmp_path):
    """Ctrl-C in a sweep, the README's recipe to finish it, and the finished sweep resumed once more
    (all its jobs kept; what tests/test_cli.py checked with two sweep launches of its own)."""
    sweep = tmp_path / "sweep"
    # four jobs: the two at K = 1 finish, the first at K = 2 is stopped by Ctrl-C, the last does
    # not start
    command = ["-m", "pipeline.K=1,2", "pipeline.M=1,2", "train.steps=200", *MLP]
    proc = start([*command, f"hydra.sweep.dir={sweep}"], tmp_path)
    third = sweep / "2_K2-M1"
    wait_for(lambda: steps_done(third) >= 3, 180, "the third job to start")
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole process group
    code, err, _ = finish(proc, 60)
    assert code == 130, (code, err)
    wait_for(lambda: not group_left(proc.pid), 10, "the sweep's processes to be gone")
    done = {j: metrics(sweep / j) for j in ("0_K1-M1", "1_K1-M2")}
    assert all(m["status"] == "ok" and len(m["losses"]) == 200 for m in done.values())
    stopped = metrics(third)
    assert stopped["status"] == "interrupted" and 3 <= len(stopped["losses"]) < 200
    assert not (sweep / "3_K2-M2" / "metrics.json").exists()  # the rest of the sweep: skipped
    rows = (sweep / "results.csv").read_text().splitlines()
    assert len(rows) == 4 and ",interrupted," in rows[3]  # what ran, gathered
    # README: "the same command with hydra.sweep.dir=<its folder> sweep.skip_done=true
    # train.resume=auto": only the jobs without an ok result run again
    code, out, _ = finish(start([*command, *_readme_sweep_resume(sweep)], tmp_path), 300)
    assert code == 0, out
    assert {j: metrics(sweep / j) for j in done} == done  # kept as they were
    resumed = metrics(third)
    assert resumed["status"] == "ok" and len(resumed["losses"]) == 200
    assert resumed["losses"][: len(stopped["losses"])] == stopped["losses"]
    assert metrics(sweep / "3_K2-M2")["status"] == "ok"
    rows = (sweep / "results.csv").read_text().splitlines()
    assert len(rows) == 5 and all(",ok," in r for r in rows[1:])
    # the finished sweep resumed again (train.resume=auto, without skip_done): every job says it
    # already finished and keeps its results as they are; the sweep is gathered again
    before = {p: p.read_text() for p in sweep.glob("*/metrics.json")}
    (sweep / "results.csv").unlink()
    again = [*command, f"hydra.sweep.dir={sweep}", "train.resume=auto"]
    code, err, _ = finish(start(again, tmp_path), 300)
    assert code == 0 and err.count("already finished") == 4, err
    assert {p: p.read_text() for p in sweep.glob("*/metrics.json")} == before
    assert len((sweep / "results.csv").read_text().splitlines()) == 5


@pytest.mark.slow
def test_sigterm_stops_the_whole_sweep_and_gathers_what_finished(tmp_path):
    sweep = tmp_path / "sweep"
    proc = start(
        [
            "-m",
            "pipeline.K=1,2",
            "pipeline.M=1,2",
            "train.steps=100000",
            *MLP,
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
    )
    first = sweep / "0_K1-M1"
    wait_for(lambda: steps_done(first) >= 5, 120, "the first job to start")
    proc.send_signal(signal.SIGTERM)
    code, err, took = finish(proc, 60)
    assert code == 130, (code, err)
    rows = (sweep / "results.csv").read_text().splitlines()
    assert len(rows) == 2 and ",interrupted," in rows[1]  # the one job that ran, as a row
    assert not list(sweep.glob("[123]_*/metrics.json"))  # the others did not run
    # re-running the sweep into its folder: the interrupted job's results are not replaced...
    again = [
        "-m",
        "pipeline.K=1,2",
        "pipeline.M=1,2",
        "train.steps=3",
        *MLP,
        f"hydra.sweep.dir={sweep}",
        "sweep.skip_done=true",
    ]
    code, err, _ = finish(start(again, tmp_path), 300)
    assert code == 1 and "train.overwrite=true" in err, err
    assert metrics(first)["status"] == "interrupted"
    # ...unless asked: skip_done runs what has no ok result (here: all, briefly)
    code, err, _ = finish(start([*again, "train.overwrite=true"], tmp_path), 300)
    assert code == 0, err
    assert all(metrics(j)["status"] == "ok" for j in sweep.glob("*_K*"))
    code, out, _ = finish(start(again, tmp_path), 300)  # all done: every job skipped
    assert code == 0 and len((sweep / "results.csv").read_text().splitlines()) == 5


@pytest.mark.slow
def test_divergence_is_reported_as_diverged(tmp_path):
    run = tmp_path / "run"
    code, err, _ = finish(
        start(
            ["train.steps=30", *MLP, "optim=sgd", "optim.lr=1e8", f"hydra.run.dir={run}"], tmp_path
        ),
        120,
    )
    assert code == 1 and len(lines(err)) == 1 and "the loss diverged at step" in err, err
    assert metrics(run)["status"] == "diverged"


@pytest.mark.slow
def test_a_run_that_cannot_fit_is_refused_before_allocating(tmp_path):
    run = tmp_path / "run"
    code, err, took = finish(
        start(
            [
                "model=transformer_lm",
                "model.L=40",
                "model.d=4096",
                "data=synthetic",
                "data.kind=tokens",
                "logger=none",
                f"hydra.run.dir={run}",
            ],
            tmp_path,
        ),
        120,
    )
    assert (
        code == 1
        and len(lines(err)) == 1
        and "the plan needs" in err
        and "train.memory_check=false" in err
    )
    assert metrics(run)["status"] == "failed" and "GiB" in metrics(run)["error"]


@pytest.mark.slow
def test_concurrent_runs_never_share_a_folder(tmp_path):
    procs = [start(["train.steps=3", *MLP], tmp_path) for _ in range(2)]
    for p in procs:
        code, err, _ = finish(p, 300)
        assert code == 0, err
    runs = list(tmp_path.glob("outputs/*/*/metrics.json"))
    assert len(runs) == 2 and runs[0].parent != runs[1].parent
    assert all(metrics(r.parent)["status"] == "ok" for r in runs)


def test_an_unwritable_folder_is_one_line_and_the_numbers_reach_stdout(
    tmp_path, monkeypatch, capsys
):
    import errno

    from gpipe_repro.config.compose import compose
    from gpipe_repro.runner import run as run_job

    real = Path.write_text

    def full(self, *a, **k):
        if self.name.endswith(".tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", full)
    m = run_job(
        compose(["train.steps=3", *MLP, "train.progress=false"], cuda_available=False), tmp_path
    )
    out, err = capsys.readouterr()
    assert m.status == "failed" and "No space left on device" in m.error
    assert len(lines(err)) == 1 and "the run's metrics follow on stdout" in err
    assert json.loads(out)["losses"] and len(json.loads(out)["losses"]) == 3  # measured, not lost
