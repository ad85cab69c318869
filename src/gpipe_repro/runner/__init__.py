"""One run: plan it, start its ranks (or be one of them), write its files, log it live.

Every entry point comes here with a validated ``RunConfig`` and a folder: ``gpipe-run`` (the Hydra app,
``launcher="local"``: this process starts the ranks on this machine), ``gpipe_repro.multinode`` under
torchrun (``launcher="torchrun"``: this process *is* one rank) and a SLURM/submitit task
(``launcher="submitit"``). Whoever owns the run — this process, or rank 0 — writes ``metrics.json``,
``trace.json`` and ``timeline.png`` through the one writer (``metrics.writer``) and owns the wandb run,
fed live from the last stage's ``progress.jsonl``.

``run`` never raises for a run that fails: it writes and returns ``status: failed`` (or ``interrupted``,
``diverged``) with the one-line reason. Only KeyboardInterrupt propagates, after the interrupted run's
files are written, so the caller can stop a sweep.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..engine import RankError
from ..errors import UserError
from ..metrics.contract import RunMetrics
from ..metrics.progress import PROGRESS_FILE, Follower, read_progress
from ..metrics.summary import base_metrics, summarize
from ..metrics.writer import OutputError, write_metrics, write_run
from ..rank import DIVERGED, Plan, RankContext, plan_model, run_rank
from ..wandb_logger import WandbRun
from .batch import engine_batch
from .guard import check_memory
from .local import launch_local
from .predict import attach_prediction
from .simulated import simulate_run
from .stop import STOP

__all__ = ["run", "LAUNCHERS", "STOP"]

LAUNCHERS = ("local", "torchrun", "submitit")


def run(
    spec: RunConfig, out: Path, *, launcher: str = "local", group: str | None = None
) -> RunMetrics | None:
    """Run ``spec`` with ``out`` as its folder. Returns its metrics (None on ranks other than 0 of a
    torchrun/SLURM job: rank 0 speaks for the run)."""
    owner = launcher == "local" or int(os.environ.get("RANK", "0")) == 0
    if owner:
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / PROGRESS_FILE).unlink(missing_ok=True)
        except OSError:
            pass  # reported when the run's files are written
    if not owner:
        _run_as_other_rank(spec, out)
        return None
    wb: WandbRun | None = None
    files: list[Path] = []
    try:
        plan = plan_model(spec)
        if spec.backend == "engine":  # train.batch_mode=fit: the largest batch this device holds
            spec = engine_batch(spec, plan)
        wb = _start_wandb(spec, out, group)
        with (
            STOP.running(out, spec.train.stop_grace_s),
            Follower(out / PROGRESS_FILE, wb.log_step if wb else (lambda rec: None)),
        ):
            if spec.backend == "sim":
                m, events = simulate_run(spec, plan, out)
            else:
                results = _results(spec, plan, out, launcher)
                m, events = summarize(spec, results, launcher)
                if spec.train.predict:  # the simulator's prediction beside the measurement
                    attach_prediction(spec, m)
        files = write_run(out, m, events)
    except KeyboardInterrupt:
        m = _stopped(spec, out, launcher, "interrupted", "interrupted by the user (SIGINT/SIGTERM)")
        files = _write(out, m)
        _finish_wandb(wb, m, files)
        raise
    except (UserError, RankError, ValueError) as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        status = "diverged" if DIVERGED in msg else "failed"
        m = _stopped(spec, out, launcher, status, msg)
        if isinstance(err, OutputError):
            _report_unwritable(m, msg)
        else:
            files = _write(out, m)
    except Exception as err:  # a bug, not a user mistake: keep the type in the one line
        m = _stopped(spec, out, launcher, "failed", f"{type(err).__name__}: {err}".splitlines()[0])
        files = _write(out, m)
    _finish_wandb(wb, m, files)
    return m


def _run_as_other_rank(spec: RunConfig, out: Path) -> None:
    """A rank other than 0 of a torchrun/SLURM job: run; on failure leave its one line for rank 0
    (``rank-<r>.error``), which reports the rank that failed first rather than its own echo of it."""
    try:
        run_rank(spec, RankContext(out, gather=True))
    except Exception as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        # The first line is what rank 0 reports; the traceback below it is for whoever debugs a bug.
        trace = "".join(traceback.format_exception(err))
        try:
            (out / f"rank-{os.environ.get('RANK', '?')}.error").write_text(msg + "\n\n" + trace)
        except OSError:
            pass
        raise


def _results(spec: RunConfig, plan: Plan, out: Path, launcher: str) -> list[Any]:
    if spec.train.memory_check:
        check_memory(spec, plan)
    if launcher == "local":
        return launch_local(spec, plan, out)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != spec.world_size:
        raise UserError(
            f"the job has {world} ranks but pipeline.K*pipeline.replicas = "
            f"{spec.pipeline.K}*{spec.pipeline.replicas} = {spec.world_size}"
        )
    results = run_rank(spec, RankContext(out, plan, gather=True))
    assert results is not None
    return list(results)


def _stopped(spec: RunConfig, out: Path, launcher: str, status: str, error: str) -> RunMetrics:
    """Metrics of a run that did not finish: its config and the steps the last stage reported."""
    m = base_metrics(spec, status, error, launcher)
    recs = read_progress(out / PROGRESS_FILE)
    m.losses = [r.loss for r in recs]
    m.step_times_s = [r.step_time_s for r in recs]
    return m


def _write(out: Path, m: RunMetrics) -> list[Path]:
    try:
        return [write_metrics(out, m)]
    except OutputError as err:
        _report_unwritable(m, str(err))
        return []


def _report_unwritable(m: RunMetrics, msg: str) -> None:
    """The folder cannot take the run's files: say so in one line, and keep the numbers on stdout."""
    print(
        f"gpipe-run: error: {msg}; the run's metrics follow on stdout", file=sys.stderr, flush=True
    )
    from ..metrics.contract import to_json

    print(to_json(m), flush=True)
    if m.status == "ok":
        m.status, m.error = "failed", msg


def _start_wandb(spec: RunConfig, out: Path, group: str | None) -> WandbRun | None:
    try:
        names = {**asdict(spec.pipeline), "model": spec.model.name}
        return WandbRun.start(spec.logger, out, asdict(spec), group, names)
    except Exception as err:  # noqa: BLE001 - logging must never lose the run
        print(f"gpipe-run: wandb failed to start: {str(err).splitlines()[0]}", file=sys.stderr)
        return None


def _finish_wandb(wb: WandbRun | None, m: RunMetrics, files: list[Path]) -> None:
    if wb is None:
        return
    try:
        wb.finish(m, files)
    except Exception as err:  # noqa: BLE001
        print(f"gpipe-run: wandb failed: {str(err).splitlines()[0]}", file=sys.stderr)
