"""``gpipe-run``: the Hydra app. Check the command line, compose, validate, run, report.

    gpipe-run model=mlp data=mnist pipeline.K=2 pipeline.M=4
    gpipe-run -m pipeline.K=1,2 pipeline.M=1,2,4,8        # a sweep, gathered into a table
    gpipe-run -m experiment=demo                          # an experiment declares its own sweep

Before Hydra starts, the command line is checked (``config.compose.preflight``): a mistake there is one
line on stderr and exit code 2, nothing written. Before Hydra writes into the run's (or the sweep's)
folder, the folder is claimed (``ClaimCallback``, ``runner.lock``): a second run into it is refused
in one line. Values are checked inside the job
(``config.validate``): a bad one gives one line, exit code 1 and a ``failed`` metrics.json; in a sweep
the other jobs still run and are gathered.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from .config.compose import CONF_DIR, preflight, sweep_world_size, to_spec
from .config.store import register
from .errors import UserError
from .metrics.contract import ModelInfo, PipelineInfo, RunMetrics
from .metrics.writer import OutputError, write_metrics
from .runner import STOP, FolderInUse, folder, lock, run
from .runner.cluster import task_env
from .wandb_logger import wandb_group

__all__ = ["main", "app", "ClaimCallback"]

register()
_failures: list[str] = []


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def app(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    if STOP.requested:  # stopping: the jobs left in a sweep do not run
        return
    if cfg.sweep.skip_done and _done(out):  # re-running a sweep: this job already has its result
        print(f"skipped (done): {out}", flush=True)
        return
    multirun = hc.mode is not None and hc.mode.name == "MULTIRUN"
    tenv = task_env()
    if tenv is not None:  # one task of a multi-task submitit/SLURM job: act as one rank
        os.environ.update(tenv)
    try:
        world = (  # device=auto and backend=auto decide once for the whole sweep
            sweep_world_size(
                sys.argv[1:],
                dict(hc.sweeper.get("params") or {}),
                int(cfg.pipeline.K),
                int(cfg.pipeline.replicas),
            )
            if multirun
            else None
        )
        spec = to_spec(cfg, sweep_world=world)
    except UserError as err:  # a bad value: this job fails, a sweep goes on
        failed = _asked(cfg, str(err))
        _record(failed, out)
        try:
            write_metrics(out, failed)
        except OutputError as werr:
            print(f"gpipe-run: error: {werr}", file=sys.stderr)
        return
    sweep = Path(hc.sweep.dir) if multirun else None
    group = wandb_group(spec.logger, spec.experiment_name, sweep)
    t0 = time.monotonic()
    try:
        m = run(spec, out, launcher="submitit" if tenv else "local", group=group)
    except (FolderInUse, lock.FolderUnusable) as err:  # nothing run, nothing written
        _failures.append(str(err))
        print(f"gpipe-run: error: {err}", file=sys.stderr, flush=True)
        return
    except KeyboardInterrupt:  # stopped at once: the run wrote its interrupted metrics.json
        STOP.requested = True
        print(
            f"gpipe-run: stopped; what it measured is in {out / 'metrics.json'}",
            file=sys.stderr,
            flush=True,
        )
        return
    if m is not None:  # None: a rank other than 0 of a SLURM job (rank 0 writes and logs)
        _record(m, out, time.monotonic() - t0)


def _done(out: Path) -> bool:
    """Whether ``out`` holds an ok metrics.json (anything else — failed, interrupted, missing, unreadable —
    is run again, and its row replaced when the sweep is gathered)."""
    import json

    try:
        return json.loads((out / "metrics.json").read_text()).get("status") == "ok"
    except (OSError, ValueError, AttributeError):
        return False


def _asked(cfg: DictConfig, error: str) -> RunMetrics:
    """A failed run's metrics when its config did not validate: keep what the user asked for."""
    m = RunMetrics(status="failed", error=error)
    try:
        m.model = ModelInfo(name=str(cfg.model.name))
        pipe = OmegaConf.to_container(cfg.pipeline)
        assert isinstance(pipe, dict)
        m.pipeline = PipelineInfo(
            **{k: v for k, v in pipe.items() if k in PipelineInfo.__dataclass_fields__}
        )
        m.batch_size = int(cfg.train.batch_size)
        m.precision = str(cfg.train.precision)
    except Exception:  # noqa: BLE001 - best effort: the error is what matters
        pass
    return m


def _record(m: RunMetrics, out: Path, wall_s: float | None = None) -> None:
    """The job's one summary line (its progress lines came before it: ``metrics.progress``)."""
    if m.status == "interrupted":
        print(f"gpipe-run: {m.error}  [{out / 'metrics.json'}]", file=sys.stderr, flush=True)
        return
    if m.status != "ok":
        _failures.append(m.error or m.status)
        print(f"gpipe-run: error: {m.error}  [{out / 'metrics.json'}]", file=sys.stderr, flush=True)
        return
    p = m.pipeline
    acc = (
        f"  accuracy {m.eval.accuracy:.3f}"
        if m.eval is not None and m.eval.accuracy is not None
        else ""
    )
    pred = (
        f" (simulated {m.predicted_throughput:.1f})" if m.predicted_throughput is not None else ""
    )
    src = "" if m.source == "measured" else f" [{m.source}]"
    speed = f"{m.throughput:.1f} samples/s" if m.throughput is not None else "no step run"
    bubble = f", bubble {m.bubble_fraction:.3f}" if m.bubble_fraction is not None else ""
    took = f" in {wall_s:.1f} s" if wall_s is not None else ""
    final = m.losses[-1] if m.losses else None
    loss = f", final loss {final:.4f}" if final is not None else ""
    print(
        f"K={p.K if p else '?'} M={p.M if p else '?'}: {len(m.losses)} steps{took}{loss}, "
        f"{speed}{pred}{src}{bubble}{acc}  -> {out}",
        flush=True,
    )


class ClaimCallback(Callback):
    """Claims the run's (or the sweep's) folder before Hydra writes anything into it (``.hydra/``,
    the job's log): Hydra calls ``on_run_start`` / ``on_multirun_start`` with the composed config
    before it creates the folder, and resolves the folder's name from the same config (its
    ``${now:}`` cached), so the folder claimed is the one Hydra then uses. A refusal is one line
    and the exit code: 2 for a folder that cannot be made or written, 1 for a folder in use by
    another run or holding a run's results. The claim is released when gpipe-run ends (``main``)."""

    def on_run_start(self, config: DictConfig, **kwargs: object) -> None:
        out = _claim(config, "hydra.run.dir", lock.RUN_LOCK)
        try:  # a folder holding a run's results: refused before Hydra rewrites its .hydra/
            folder.check(config, out)  # type: ignore[arg-type]  # it reads train.* alone
        except FolderInUse as err:
            _refuse(str(err), 1)

    def on_multirun_start(self, config: DictConfig, **kwargs: object) -> None:
        _claim(config, "hydra.sweep.dir", lock.SWEEP_LOCK)


def _claim(config: DictConfig, key: str, name: str) -> Path:
    try:
        value = str(OmegaConf.select(config, key))
    except Exception as err:  # noqa: BLE001 - an interpolation in the folder's name
        parent, _, leaf = key.rpartition(".")
        raw = OmegaConf.select(config, parent)._get_node(leaf)._value()
        why = " ".join(str(err).split("\n")[0].split())
        _refuse(f"{key}={raw}: cannot be resolved ({why}); give a folder ({key}=...)", 2)
    if not value.strip():
        _refuse(f"{key} is empty; give a folder, e.g. {key}=outputs/my-run", 2)
    out = Path(value).absolute()
    try:
        lock.acquire(out, name=name, key=key)
    except lock.FolderUnusable as err:
        _refuse(f"{key}={value}: {err}; choose a folder you can write ({key}=...)", 2)
    except FolderInUse as err:
        _refuse(str(err), 1)
    return out


def _refuse(line: str, code: int) -> None:
    print(f"gpipe-run: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(code)  # past Hydra's callback guard, which turns exceptions into warnings


def main() -> None:
    err = preflight(sys.argv[1:])
    if err:
        print(f"gpipe-run: error: {err}", file=sys.stderr)
        sys.exit(2)
    STOP.install()
    try:
        app()
    except KeyboardInterrupt:  # outside a run (Hydra's set-up, the gather): nothing to save
        STOP.requested = True
    finally:
        lock.release_all()  # the run's or the sweep's folder (ClaimCallback)
    if STOP.requested:
        sys.exit(130)
    if _failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
