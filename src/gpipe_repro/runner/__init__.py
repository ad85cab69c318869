"""One run: plan it, start its ranks (or be one of them), write its files, log it live.

Every entry point comes here with a validated ``RunConfig`` and a folder: ``gpipe-run`` (the Hydra app,
``launcher="local"``: this process starts the ranks on this machine), ``gpipe_repro.multinode`` under
torchrun (``launcher="torchrun"``: this process *is* one rank) and a SLURM/submitit task
(``launcher="submitit"``). Whoever owns the run — this process, or rank 0 — writes ``metrics.json``,
``trace.json`` and ``timeline.png`` through the one writer (``metrics.writer``) and owns the wandb run,
fed live from the last stage's ``progress.jsonl``.

The run's decisions are made once, first (``runner.planning.plan``: ``runplan.plan.RunPlan``), and
handed to the guard, the simulator, the prediction and every rank. Its folder is claimed before that:
by this process alone while it runs (``runner.lock``: a second run into it is refused), and a finished
run is never replaced by something worse (``runner.folder``).

``run`` never raises for a run that fails: it writes and returns ``status: failed`` (or ``interrupted``,
``diverged``) with the one-line reason. It raises ``FolderInUse`` (one line, nothing written) for a
folder holding another run's results or in use by another run, and lets KeyboardInterrupt through after the interrupted run's
files are written, so the caller can stop a sweep.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..engine import RankError
from ..errors import UserError
from ..metrics.contract import ResumeInfo, RunMetrics
from ..metrics.progress import PROGRESS_FILE, Follower, console_progress, tee
from ..metrics.summary import stopped_metrics, summarize
from ..metrics.writer import OutputError, report_unwritable
from ..rank import DIVERGED, RankContext, run_rank
from ..runplan.model import plan_model
from ..wandb_logger import WandbRun, finish_run, start_run
from . import folder, lock, resume
from .folder import FolderInUse
from .local import run_ranks
from .planning import plan
from .predict import attach_prediction
from .simulated import simulate_run
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
        with _nccl_env(spec):  # the environment the ranks and the link measurement inherit
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
    events: list[Any] = []
    resumed: ResumeInfo | None = None
    stopped: KeyboardInterrupt | None = None  # raised again once the run's files are written
    try:
        if spec.plan.mode == "auto" and launcher != "local":
            raise UserError(
                f"plan=auto runs under gpipe-run's own launcher, not {launcher}: this job's ranks "
                "started before the planner chose K; run gpipe-plan and pass its pick's options"
            )
        model = plan_model(spec)
        planned = plan(spec, model)
        spec = planned.spec  # train.batch_mode=fit: the batch as run
        planned, resumed = resume.decide(planned, out, claim.run)  # said in one line
        spec = planned.spec
        wb = start_run(spec, out, group)
        p, t = spec.pipeline, spec.train
        with (
            STOP.running(out, t.stop_grace_s),
            console_progress(
                t.progress, f"K={p.K} M={p.M}", t.steps, t.progress_every_s
            ) as console,
            Follower(out / PROGRESS_FILE, tee(wb.log_step if wb else None, console)),
        ):
            if spec.backend == "sim":
                m, events = simulate_run(planned, model, out)
            else:
                results = run_ranks(planned, model, out, launcher, claim.run)
                m, events = summarize(planned, results, launcher)
                if spec.train.predict:  # the simulator's prediction beside the measurement
                    attach_prediction(planned, model, m)
    except FolderInUse:  # resume.ResumeRefused: nothing run, nothing written
        raise
    except (Exception, KeyboardInterrupt) as err:  # what it measured so far, and why it stopped
        stopped = err if isinstance(err, KeyboardInterrupt) else None
        m, events = stopped_metrics(spec, out / PROGRESS_FILE, launcher, *_why(err)), []
    m.resume = resumed
    try:
        files = folder.write(out, m, events)
    except OutputError as err:  # the folder cannot take them: the numbers go to stdout
        files = report_unwritable(m, str(err))
    finish_run(wb, m, files)
    if stopped is not None:
        raise stopped
    return m


def _why(err: BaseException) -> tuple[str, str]:
    """The status and the one-line reason of a run that ``err`` stopped."""
    if isinstance(err, KeyboardInterrupt):
        return "interrupted", "interrupted by the user (SIGINT/SIGTERM)"
    if isinstance(err, (UserError, RankError, ValueError)):
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        return ("diverged" if DIVERGED in msg else "failed"), msg
    return "failed", f"{type(err).__name__}: {err}".splitlines()[0]  # a bug: its type in the line


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
