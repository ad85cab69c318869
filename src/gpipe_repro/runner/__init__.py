"""One run: plan it, start its ranks (or be one of them), write its files, log it live.

Every entry point comes here with a validated ``RunConfig`` and a folder: ``gpipe-run`` (the Hydra app,
``launcher="local"``: this process starts the ranks on this machine), ``gpipe_repro.multinode`` under
torchrun (``launcher="torchrun"``: this process *is* one rank) and a SLURM/submitit task
(``launcher="submitit"``). Whoever owns the run — this process, or rank 0 — writes ``metrics.json``,
``trace.json`` and ``timeline.png`` through the one writer (``metrics.writer``) and owns the wandb run,
fed live from the last stage's ``progress.jsonl``.

The run's decisions are made once, first (``plan``: ``runplan.plan.RunPlan``), and handed to the
guard, the simulator, the prediction and every rank. Its folder is claimed before that: by this
process alone while it runs (``runner.lock``: a second run into it is refused), and a finished run
is never replaced by something worse (``runner.folder``).

``run`` never raises for a run that fails: it writes and returns ``status: failed`` (or ``interrupted``,
``diverged``) with the one-line reason. It raises ``FolderInUse`` (one line, nothing written) for a
folder holding another run's results or in use by another run, and lets KeyboardInterrupt through after the interrupted run's
files are written, so the caller can stop a sweep.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..config.device import DeviceMemory, device_for, local_ranks
from ..engine import RankError
from ..errors import UserError
from ..metrics.contract import ResumeInfo, RunMetrics
from ..metrics.progress import (
    PROGRESS_FILE,
    ConsoleProgress,
    Follower,
    StepRecord,
    read_progress,
)
from ..metrics.summary import base_metrics, summarize
from ..metrics.writer import OutputError
from ..rank import DIVERGED, RankContext, run_rank
from ..runplan.plan import ModelPlan, RunPlan, plan_model, plan_run
from ..wandb_logger import WandbRun
from . import folder, lock, resume
from .autoplan import auto_plan
from .folder import FolderInUse
from .guard import check_memory
from .local import launch_local
from .predict import attach_prediction
from .simulated import sim_planning, simulate_run
from .stop import STOP

__all__ = ["run", "plan", "LAUNCHERS", "STOP", "FolderInUse"]

LAUNCHERS = ("local", "torchrun", "submitit")


def run(
    spec: RunConfig, out: Path, *, launcher: str = "local", group: str | None = None
) -> RunMetrics | None:
    """Run ``spec`` with ``out`` as its folder. Returns its metrics (None on ranks other than 0 of a
    torchrun/SLURM job: rank 0 speaks for the run). Raises ``FolderInUse`` — nothing run, nothing
    written — when ``out`` holds another run's results (``runner.folder``) or another run is
    running in it (``runner.lock``: the folder is claimed first, and released at the end)."""
    owner = launcher == "local" or int(os.environ.get("RANK", "0")) == 0
    if not owner:
        if spec.backend == "engine" and spec.plan.mode != "auto":  # sim: rank 0's alone
            with _nccl_env(spec):
                _run_as_other_rank(spec, out)
        return None
    claimed = lock.acquire(out, key=None)  # FolderInUse: another run holds it, nothing written
    try:
        return _run_owned(spec, out, launcher, group, claimed)
    finally:
        claimed.release()


def _run_owned(
    spec: RunConfig, out: Path, launcher: str, group: str | None, claimed: lock.Lock
) -> RunMetrics:
    """``run`` in a folder this process holds (``runner.lock``)."""
    claim = folder.claim(spec, out, claimed.holder.run)
    if claim.run is not None:
        claimed.set_run(claim.run)
    if claim.finished is not None:
        print(
            f"gpipe-run: the run in {out} already finished ({len(claim.finished.losses)} steps); "
            "its results are kept as they are",
            file=sys.stderr,
            flush=True,
        )
        return claim.finished
    try:
        out.mkdir(parents=True, exist_ok=True)
        if claim.fresh:
            (out / PROGRESS_FILE).unlink(missing_ok=True)
    except OSError:
        pass  # reported when the run's files are written
    wb: WandbRun | None = None
    files: list[Path] = []
    resumed: ResumeInfo | None = None
    try:
        if spec.plan.mode == "auto" and launcher != "local":
            raise UserError(
                f"plan=auto runs under gpipe-run's own launcher, not {launcher}: this job's ranks "
                "started before the planner chose K; run gpipe-plan and pass its pick's options"
            )
        with _nccl_env(spec):
            model = plan_model(spec)
            planned = plan(spec, model)
            spec = planned.spec  # train.batch_mode=fit: the batch as run
            planned, resumed = resume.decide(planned, out, claim.run)  # said in one line
            spec = planned.spec
            wb = _start_wandb(spec, out, group)
            with (
                STOP.running(out, spec.train.stop_grace_s),
                _console(spec) as console,
                Follower(out / PROGRESS_FILE, _tee(wb.log_step if wb else None, console)),
            ):
                if spec.backend == "sim":
                    m, events = simulate_run(planned, model, out)
                else:
                    results = _results(planned, model, out, launcher, claim.run)
                    m, events = summarize(planned, results, launcher)
                    if spec.train.predict:  # the simulator's prediction beside the measurement
                        attach_prediction(planned, model, m)
        m.resume = resumed
        files = folder.write(out, m, events)
    except KeyboardInterrupt:
        m = _stopped(spec, out, launcher, "interrupted", "interrupted by the user (SIGINT/SIGTERM)")
        m.resume = resumed
        files = _write(out, m)
        _finish_wandb(wb, m, files)
        raise
    except FolderInUse:  # resume.ResumeRefused: nothing run, nothing written
        raise
    except (UserError, RankError, ValueError) as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        status = "diverged" if DIVERGED in msg else "failed"
        m = _stopped(spec, out, launcher, status, msg)
        m.resume = resumed
        if isinstance(err, OutputError):
            _report_unwritable(m, msg)
        else:
            files = _write(out, m)
    except Exception as err:  # a bug, not a user mistake: keep the type in the one line
        m = _stopped(spec, out, launcher, "failed", f"{type(err).__name__}: {err}".splitlines()[0])
        m.resume = resumed
        files = _write(out, m)
    _finish_wandb(wb, m, files)
    return m


def plan(spec: RunConfig, model: ModelPlan) -> RunPlan:
    """The run's plan, against the memory it will run in: the hardware profile's (``backend=sim``),
    or the devices the ranks run on — the GPU with the least free memory among this host's, or this
    host's RAM shared by its ranks. ``plan=auto``: the pipeline options are the planner's pick,
    chosen here once (``runner.autoplan``)."""
    if spec.plan.mode == "auto":
        assert spec.plan.devices is not None  # resolved at validation
        device = None if spec.backend == "sim" else _engine_memory(spec, spec.plan.devices)
        spec, auto, choice = auto_plan(spec, model, device)
        return replace(_plan(spec, model), auto=auto, choice=choice)
    return _plan(spec, model)


def _plan(spec: RunConfig, model: ModelPlan) -> RunPlan:
    if spec.backend == "sim":
        memory, times, source = sim_planning(spec, model)
        return plan_run(spec, model, memory, time_costs=times, time_source=source)
    return plan_run(spec, model, _engine_memory(spec), device_type=spec.device)


def _engine_memory(spec: RunConfig, ranks: int | None = None) -> DeviceMemory:
    """The memory the ranks run in (``ranks``: how many, default the run's world size)."""
    if spec.device != "cuda":
        return device_for("cpu").memory()
    world = spec.world_size if ranks is None else ranks
    here = min(local_ranks(world), max(1, device_for("cuda").count()))
    return min((device_for("cuda", i).memory() for i in range(here)), key=lambda m: m.budget())


@contextmanager
def _nccl_env(spec: RunConfig) -> Iterator[None]:
    """``pipeline.nccl_p2p=false``: NCCL_P2P_DISABLE=1 for the run's ranks and link measurement (the
    environment they inherit), so GPUs exchange through host memory — Table 3's "without NVLink"."""
    if spec.pipeline.nccl_p2p:
        yield
        return
    before = os.environ.get("NCCL_P2P_DISABLE")
    os.environ["NCCL_P2P_DISABLE"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("NCCL_P2P_DISABLE", None)
        else:
            os.environ["NCCL_P2P_DISABLE"] = before


def _run_as_other_rank(spec: RunConfig, out: Path) -> None:
    """A rank other than 0 of a torchrun/SLURM job: run with rank 0's plan; on failure leave its one
    line for rank 0 (``rank-<r>.error``), which reports the rank that failed first rather than its
    own echo of it."""
    try:
        run_rank(spec, None, RankContext(out, gather=True))
    except Exception as err:
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        # The first line is what rank 0 reports; the traceback below it is for whoever debugs a bug.
        trace = "".join(traceback.format_exception(err))
        try:
            (out / f"rank-{os.environ.get('RANK', '?')}.error").write_text(msg + "\n\n" + trace)
        except OSError:
            pass
        raise


def _results(
    planned: RunPlan, model: ModelPlan, out: Path, launcher: str, run_id: str | None
) -> list[Any]:
    spec = planned.spec
    if spec.train.memory_check:
        check_memory(planned)
    if launcher == "local":
        return launch_local(planned, model, out, run_id)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != spec.world_size:
        raise UserError(
            f"the job has {world} ranks but pipeline.K*pipeline.replicas = "
            f"{spec.pipeline.K}*{spec.pipeline.replicas} = {spec.world_size}"
        )
    results = run_rank(spec, planned, RankContext(out, run_id, model, gather=True))
    assert results is not None
    return list(results)


def _stopped(spec: RunConfig, out: Path, launcher: str, status: str, error: str) -> RunMetrics:
    """Metrics of a run that did not finish: its config and the steps the last stage reported (a
    resumed run's record holds its earlier attempts' steps too; a step run again replaces its
    earlier record)."""
    m = base_metrics(spec, status, error, launcher)
    by_step = {r.step: r for r in read_progress(out / PROGRESS_FILE)}
    recs: list[StepRecord] = []
    while len(recs) in by_step:
        recs.append(by_step[len(recs)])
    m.losses = [r.loss for r in recs]
    m.step_times_s = [r.step_time_s for r in recs]
    return m


def _write(out: Path, m: RunMetrics) -> list[Path]:
    try:
        return folder.write(out, m)
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


@contextmanager
def _console(spec: RunConfig) -> Iterator[ConsoleProgress | None]:
    """The run's progress on stderr (``train.progress``; env GPIPE_PROGRESS=0: none)."""
    if not spec.train.progress or os.environ.get("GPIPE_PROGRESS", "1") == "0":
        yield None
        return
    p = spec.pipeline
    with ConsoleProgress(f"K={p.K} M={p.M}", spec.train.steps, spec.train.progress_every_s) as c:
        yield c


def _tee(*calls: Callable[[StepRecord], Any] | None) -> Callable[[StepRecord], None]:
    """One follower callback that calls each of ``calls`` (None: skipped)."""

    def each(rec: StepRecord) -> None:
        for call in calls:
            if call is not None:
                call(rec)

    return each


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
