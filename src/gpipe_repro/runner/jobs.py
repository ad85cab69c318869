"""Run many ``gpipe-run`` jobs as parallel subprocesses on this machine: bounded, resumable, stoppable.

An experiment whose jobs depend on each other (fine-tuning needs the pre-training's save) or differ in
more than one Hydra sweep can express (targets with their own data options) is a list of :class:`Job`:
one ``gpipe-run`` command each — a run (``hydra.run.dir``) or a sweep (``-m``, ``hydra.sweep.dir``: its
runs share one process, so imports and start-up are paid once) — with the folders its runs write their
``metrics.json`` to, the cores it occupies and the job it waits for. Each job's folder gets
``job.json`` (the command, the caller's ``meta``, how it ended, its wall time) and ``log.txt`` (its
output).

- **Resumable**: a job whose runs all hold an ``ok`` metrics.json from the same command is reused, not
  re-run, so the same invocation after an interruption only runs what is missing.
- **Bounded**: at most ``slots`` cores busy (a K = 2 job takes 2); every job has a time limit, after
  which it is asked to stop (SIGINT: stop after the current step) and killed 60 s later.
- **Stoppable**: each job runs in its own process group, so Ctrl-C reaches this process only; it
  forwards one SIGINT to each running job (which then stops after its current step and writes an
  ``interrupted`` metrics.json), waits for them (killing what outlives the grace period) and re-raises.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["Job", "Outcome", "run_jobs", "read_job", "JOB_FILE"]

JOB_FILE = "job.json"
LOG_FILE = "log.txt"
GRACE_S = 60.0  # after SIGINT, how long a job may take to stop before it is killed
POLL_S = 0.2


@dataclass
class Job:
    """One ``gpipe-run`` command. ``argv``: its arguments (with the output folders: ``hydra.run.dir``
    or ``-m hydra.sweep.dir=...``); ``folder``: where job.json and log.txt go; ``runs``: the folders of
    its runs' metrics.json (default: ``folder``); ``slots``: the cores it keeps busy (K x threads);
    ``after``: the name of a job that must end ``ok`` first."""

    name: str
    argv: list[str]
    folder: Path
    runs: list[Path] = field(default_factory=list)
    slots: int = 1
    after: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.runs = list(self.runs) or [self.folder]


@dataclass
class Outcome:
    status: str  # the run's metrics.json status (ok, failed, interrupted, diverged), or failed
    seconds: float  # wall time of the run that produced the metrics (a reused one's, as recorded)
    reused: bool = False
    error: str | None = None


def read_job(folder: Path) -> dict[str, Any] | None:
    """A job folder's ``job.json``, or None when it has none (or it cannot be read)."""
    try:
        return json.loads((Path(folder) / JOB_FILE).read_text())
    except (OSError, ValueError):
        return None


def _metrics_status(job: Job) -> tuple[str | None, str | None]:
    """ok when every run of the job is ok; else the first other status and its error (None: a run
    wrote no readable metrics.json)."""
    for folder in job.runs:
        try:
            m = json.loads((folder / "metrics.json").read_text())
        except (OSError, ValueError):
            return None, f"no metrics.json in {folder}"
        if m.get("status") != "ok":
            return m.get("status") or "failed", m.get("error")
    return "ok", None


def _write_job(job: Job, outcome: Outcome | None) -> None:
    record: dict[str, Any] = {"name": job.name, "argv": job.argv, "meta": job.meta}
    if outcome is not None:
        record.update(status=outcome.status, seconds=round(outcome.seconds, 3), error=outcome.error)
    job.folder.mkdir(parents=True, exist_ok=True)
    tmp = job.folder / (JOB_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    tmp.replace(job.folder / JOB_FILE)


def _done(job: Job) -> Outcome | None:
    """The recorded outcome when this very command already ran ok in the job's folder."""
    rec = read_job(job.folder)
    status, _ = _metrics_status(job)
    if rec is None or rec.get("argv") != job.argv or rec.get("status") != "ok" or status != "ok":
        return None
    return Outcome("ok", float(rec.get("seconds") or 0.0), reused=True)


@dataclass
class _Running:
    job: Job
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float
    asked_to_stop: float | None = None


def _start(job: Job, command: Sequence[str]) -> _Running:
    _write_job(job, None)
    for folder in job.runs:  # a stale metrics.json must not pass for this command's
        (folder / "metrics.json").unlink(missing_ok=True)
    cmd = [*command, *job.argv]
    log = (job.folder / LOG_FILE).open("wb")
    log.write((" ".join(cmd) + "\n").encode())
    log.flush()
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    return _Running(job, proc, log, time.monotonic())


def _finish(r: _Running, timed_out: bool) -> Outcome:
    r.log.close()
    seconds = time.monotonic() - r.started
    status, error = _metrics_status(r.job)
    if status is None:
        status = "failed"
        error = f"exit code {r.proc.returncode}, {error}; see {r.job.folder / LOG_FILE}"
    if timed_out and status != "ok":
        status, error = "failed", f"stopped at its time limit ({error})"
    return Outcome(status, seconds, error=error)


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal a job's process group (the job and the ranks it started), if it still exists."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_jobs(
    jobs: Sequence[Job],
    *,
    slots: int = 1,
    timeout_s: float = 3600.0,
    grace_s: float = GRACE_S,
    command: Sequence[str] = (sys.executable, "-m", "gpipe_repro"),
    echo: Callable[[str], None] = print,
) -> dict[str, Outcome]:
    """Run ``jobs`` (in list order as slots free up) and return each one's outcome by name.
    ``command``: what each job's ``argv`` is appended to (``gpipe-run``). A job past ``timeout_s`` is
    asked to stop (SIGINT) and killed ``grace_s`` later if it has not.

    A job whose ``after`` did not end ok is not started: it fails with that reason. Raises
    KeyboardInterrupt after stopping the running jobs when this process is interrupted."""
    if slots < 1:
        raise ValueError(f"slots={slots} must be >= 1")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError("job names must be unique")
    outcomes: dict[str, Outcome] = {}
    pending = list(jobs)
    running: list[_Running] = []
    total, t0 = len(jobs), time.monotonic()

    def report(job: Job, o: Outcome) -> None:
        outcomes[job.name] = o
        if not o.reused:
            _write_job(job, o)
        accs = [a for a in map(_accuracy, job.runs) if a is not None] if o.status == "ok" else []
        what = "reused" if o.reused else f"{o.seconds:.0f} s"
        shown = " ".join(f"{a:.4f}" for a in accs)
        tail = f"  accuracy {shown}" if accs else f"  {o.error}" if o.error else ""
        echo(f"[{len(outcomes)}/{total}] {job.name}: {o.status} ({what}){tail}")

    try:
        while pending or running:
            for r in list(running):  # collect what ended; stop what ran out of time
                if r.proc.poll() is not None:
                    running.remove(r)
                    report(r.job, _finish(r, r.asked_to_stop is not None))
                elif r.asked_to_stop is None and time.monotonic() - r.started > timeout_s:
                    r.asked_to_stop = time.monotonic()
                    _signal(r.proc, signal.SIGINT)
                elif r.asked_to_stop is not None and time.monotonic() - r.asked_to_stop > grace_s:
                    _signal(r.proc, signal.SIGKILL)
            busy = sum(min(r.job.slots, slots) for r in running)
            for job in list(pending):
                dep = outcomes.get(job.after) if job.after else None
                if job.after and dep is None:
                    continue  # its dependency has not ended yet
                pending.remove(job)
                if dep is not None and dep.status != "ok":
                    report(
                        job,
                        Outcome(
                            "failed",
                            0.0,
                            error=f"needs {job.after}, which ended {dep.status}: {dep.error}",
                        ),
                    )
                    continue
                done = _done(job)
                if done is not None:
                    report(job, done)
                    continue
                need = min(job.slots, slots)
                if busy + need > slots:
                    pending.insert(0, job)  # keep the list order: wait for room
                    break
                running.append(_start(job, command))
                busy += need
            if pending or running:
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        _stop_all(running, echo)
        raise
    echo(f"{total} jobs in {time.monotonic() - t0:.0f} s")
    return outcomes


def _stop_all(running: list[_Running], echo: Callable[[str], None]) -> None:
    """Ask every running job to stop after its current step; kill what outlives the grace period."""
    if not running:
        return
    echo(
        f"stopping {len(running)} running job(s) after their current step (at most {GRACE_S:.0f} s)"
    )
    for r in running:
        _signal(r.proc, signal.SIGINT)
    deadline = time.monotonic() + GRACE_S
    try:
        for r in running:
            try:
                r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(r.proc, signal.SIGKILL)
                r.proc.wait()
    except KeyboardInterrupt:  # a second Ctrl-C: stop at once
        for r in running:
            _signal(r.proc, signal.SIGKILL)
            r.proc.wait()
    for r in running:
        _write_job(r.job, _finish(r, False))


def _accuracy(folder: Path) -> float | None:
    try:
        m = json.loads((folder / "metrics.json").read_text())
        return (m.get("eval") or {}).get("accuracy")
    except (OSError, ValueError):
        return None
