"""runner.jobs: parallel gpipe-run jobs within a core budget, dependencies, reuse, time limits.

The jobs here are a stand-in command (a few lines of Python) that writes a metrics.json the way a run
does, so the scheduling is tested without training anything.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from gpipe_repro.runner.jobs import Job, read_job, run_jobs

FAKE = """
import json, sys, time
from pathlib import Path
args = dict(a.split("=", 1) for a in sys.argv[1:])
out = Path(args["out"])
out.mkdir(parents=True, exist_ok=True)
t0 = time.time()
time.sleep(float(args.get("sleep", "0")))
with open(out.parent / "spans.txt", "a") as f:
    f.write(f"{args['name']} {t0} {time.time()}\\n")
m = {"status": args.get("status", "ok"), "error": args.get("error"), "eval": {"accuracy": 0.5}}
(out / "metrics.json").write_text(json.dumps(m))
"""


@pytest.fixture
def command(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE)
    return [sys.executable, str(script)]


def job(tmp: Path, name: str, *, slots: int = 1, after: str | None = None, **kw: str) -> Job:
    folder = tmp / "jobs" / name
    argv = [f"name={name}", f"out={folder}", *(f"{k}={v}" for k, v in kw.items())]
    return Job(name, argv, folder, slots=slots, after=after)


def spans(tmp: Path) -> dict[str, tuple[float, float]]:
    out = {}
    for line in (tmp / "jobs" / "spans.txt").read_text().splitlines():
        name, a, b = line.split()
        out[name] = (float(a), float(b))
    return out


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_at_most_slots_run_at_once_and_a_wide_job_runs_alone(tmp_path, command):
    jobs = [job(tmp_path, f"j{i}", sleep="0.6") for i in range(4)] + [
        job(tmp_path, "wide", slots=2, sleep="0.6")
    ]
    out = run_jobs(jobs, slots=2, command=command, echo=lambda s: None)
    assert all(o.status == "ok" and not o.reused for o in out.values())
    s = spans(tmp_path)
    for t in [s[n][0] + 0.05 for n in s]:  # never more than 2 one-slot jobs at any start time
        assert sum(a <= t < b for a, b in s.values()) <= 2
    assert not any(overlap(s["wide"], s[f"j{i}"]) for i in range(4))
    assert any(overlap(s["j0"], s[f"j{i}"]) for i in range(1, 4))  # but the narrow ones do share


def test_a_failed_dependency_fails_its_dependents_without_running_them(tmp_path, command):
    jobs = [
        job(tmp_path, "pre", status="failed", error="boom"),
        job(tmp_path, "ft", after="pre"),
        job(tmp_path, "free"),
    ]
    out = run_jobs(jobs, slots=2, command=command, echo=lambda s: None)
    assert out["pre"].status == "failed" and out["pre"].error == "boom"
    assert out["ft"].status == "failed"
    assert out["ft"].error == "needs pre, which ended failed: boom"
    assert not (tmp_path / "jobs" / "ft" / "metrics.json").exists()
    assert out["free"].status == "ok"
    assert read_job(tmp_path / "jobs" / "ft")["error"] == out["ft"].error


def test_dependents_start_after_their_dependency(tmp_path, command):
    jobs = [job(tmp_path, "pre", sleep="0.4"), job(tmp_path, "ft", after="pre")]
    run_jobs(jobs, slots=2, command=command, echo=lambda s: None)
    s = spans(tmp_path)
    assert s["ft"][0] >= s["pre"][1]


def test_the_same_command_is_reused_and_a_changed_or_failed_one_runs_again(tmp_path, command):
    first = [job(tmp_path, "a"), job(tmp_path, "b", status="failed"), job(tmp_path, "c")]
    run_jobs(first, slots=1, command=command, echo=lambda s: None)
    again = [job(tmp_path, "a"), job(tmp_path, "b"), job(tmp_path, "c", sleep="0")]
    out = run_jobs(again, slots=1, command=command, echo=lambda s: None)
    assert out["a"].reused and out["a"].status == "ok"
    assert not out["b"].reused and out["b"].status == "ok"
    assert not out["c"].reused  # another command: its old metrics do not count
    assert json.loads((tmp_path / "jobs" / "c" / "job.json").read_text())["argv"] == again[2].argv


def test_a_sweep_is_ok_only_when_every_run_is(tmp_path, command):
    folder = tmp_path / "jobs" / "sweep"
    sweep = Job(
        "sweep", ["name=sweep", f"out={folder / 's0'}"], folder, runs=[folder / "s0", folder / "s1"]
    )
    out = run_jobs([sweep], slots=1, command=command, echo=lambda s: None)
    assert out["sweep"].status == "failed"
    assert "no metrics.json in" in out["sweep"].error and "s1" in out["sweep"].error


def test_a_job_past_its_time_limit_is_stopped(tmp_path, command):
    # Asked to stop (SIGINT) at 0.5 s, killed 5 s later if it has not stopped: on a loaded machine the
    # SIGINT can land before the job's interpreter is listening, and then the kill must end it.
    t0 = time.monotonic()
    out = run_jobs(
        [job(tmp_path, "slow", sleep="60")],
        slots=1,
        timeout_s=0.5,
        grace_s=5.0,
        command=command,
        echo=lambda s: None,
    )
    assert time.monotonic() - t0 < 30  # the job alone would sleep 60 s
    assert out["slow"].status == "failed"
    assert out["slow"].error.startswith("stopped at its time limit")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="slots=0"):
        run_jobs([], slots=0)
    with pytest.raises(ValueError, match="unique"):
        run_jobs([Job("a", [], Path("x")), Job("a", [], Path("y"))])
