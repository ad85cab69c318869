"""wandb, offline by default: one live run per job, one summary run per sweep, in one group.

The process that owns a job (``gpipe-run``, or rank 0 under torchrun) owns its wandb run: it follows
the last stage's ``progress.jsonl`` and logs each step as it arrives (loss, step time, samples/s,
tokens/s), then adds the timeline as an image, ``trace.json`` and ``metrics.json`` as an artifact and the
metrics as the summary. A simulated run is logged the same way. Online mode with no reachable server
hangs for minutes, so ``offline`` is the default (``wandb sync`` uploads later); tests run with
``WANDB_MODE=disabled``. Every run is finished before the job returns, or later jobs of a multirun
would log into it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from .config import LoggerConfig, RunConfig
from .metrics.contract import RunMetrics
from .metrics.progress import StepRecord

__all__ = ["WandbRun", "start_run", "finish_run", "log_sweep_table", "wandb_group"]


def _mode(spec: LoggerConfig) -> Literal["online", "offline", "disabled"]:
    mode = os.environ.get("WANDB_MODE", spec.mode)
    return "online" if mode == "online" else "disabled" if mode == "disabled" else "offline"


def _enabled(spec: LoggerConfig) -> bool:
    return spec.name == "wandb" and _mode(spec) != "disabled"


def wandb_group(spec: LoggerConfig, experiment: str | None, sweep_dir: Path | None) -> str | None:
    """One group for a sweep's jobs and its summary run: the logger's, the experiment, or the sweep folder."""
    return spec.group or experiment or (sweep_dir.name if sweep_dir is not None else None)


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[f"{prefix}{k}"] = v
    return out


class WandbRun:
    """One job's run. ``start`` returns None when logging is off."""

    def __init__(self, run: Any) -> None:
        self.run = run

    @classmethod
    def start(
        cls,
        spec: LoggerConfig,
        out_dir: Path,
        config: dict[str, Any],
        group: str | None,
        names: dict[str, Any],
    ) -> WandbRun | None:
        if not _enabled(spec):
            return None
        import wandb

        run = wandb.init(
            project=spec.project,
            group=group,
            name=spec.name_format.format(**names),
            dir=str(out_dir),
            mode=_mode(spec),
            config=config,
            reinit="finish_previous",
        )
        return cls(run)

    @property
    def folder(self) -> str:
        return str(Path(self.run.dir).parent)

    def log_step(self, rec: StepRecord) -> None:
        row = {"loss": rec.loss, "step_time_s": rec.step_time_s, "samples_per_s": rec.samples_per_s}
        if rec.tokens_per_s is not None:
            row["tokens_per_s"] = rec.tokens_per_s
        self.run.log({k: v for k, v in row.items() if v is not None}, step=rec.step)

    def finish(self, m: RunMetrics, files: Sequence[Path]) -> None:
        import wandb

        try:
            d = m.to_dict()
            self.run.summary.update(
                _flat(
                    {
                        k: v
                        for k, v in d.items()
                        if k not in ("losses", "step_times_s", "layer_costs", "stages")
                    }
                )
            )
            png = next((f for f in files if f.suffix == ".png"), None)
            if png is not None:
                self.run.log({"timeline": wandb.Image(str(png))})
            data = [f for f in files if f.suffix == ".json"]
            if data:
                art = wandb.Artifact(f"run-files-{self.run.id}", type="run-files")
                for f in data:
                    art.add_file(str(f))
                self.run.log_artifact(art)
        finally:
            self.run.finish()


def start_run(spec: RunConfig, out: Path, group: str | None) -> WandbRun | None:
    """The job's run, named from its pipeline options; None when logging is off, or when wandb fails
    to start (one line on stderr: logging never loses the run)."""
    try:
        names = {**asdict(spec.pipeline), "model": spec.model.name}
        return WandbRun.start(spec.logger, out, asdict(spec), group, names)
    except Exception as err:  # noqa: BLE001 - logging must never lose the run
        print(f"gpipe-run: wandb failed to start: {str(err).splitlines()[0]}", file=sys.stderr)
        return None


def finish_run(wb: WandbRun | None, m: RunMetrics, files: Sequence[Path]) -> None:
    """Finish the job's run (if any) with its metrics and files; a failure is one line on stderr."""
    if wb is None:
        return
    try:
        wb.finish(m, files)
    except Exception as err:  # noqa: BLE001
        print(f"gpipe-run: wandb failed: {str(err).splitlines()[0]}", file=sys.stderr)


def log_sweep_table(
    spec: LoggerConfig, out_dir: Path, columns: list[str], rows: list[list[Any]], group: str | None
) -> str | None:
    if not _enabled(spec):
        return None
    import wandb

    run = wandb.init(
        project=spec.project,
        group=group,
        name="sweep-summary",
        job_type="summary",
        dir=str(out_dir),
        mode=_mode(spec),
        reinit="finish_previous",
    )
    try:
        run.log({"results": wandb.Table(columns=list[str | int](columns), data=rows)})
        return str(Path(run.dir).parent)
    finally:
        run.finish()
