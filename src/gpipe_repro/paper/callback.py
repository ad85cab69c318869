"""Hydra callback: at the end of a multirun, report the sweep through its paper artefact.

Every sweep gets its table beside it (``paper.sweep``: ``results.csv``, ``results.md``,
``results.png``); an experiment with an artefact of its own (``paper.registry``: Table 5, Fig. 3) also
gets that one, in ``<sweep>/report/``, and it is the one published. Only the experiment's make target
(``gpipe-run -m experiment=NAME``, no other override) publishes, to ``reports/NAME/``, through the
one publish rule (``artefact.publish``) — and not with ``sweep.publish=false`` (``make demo`` writes
its sweep folder only; ``make demo-publish`` publishes); any other sweep leaves the committed report
as it is and says why. A job that failed is a failed row: the table, page and plot are written
whatever the jobs did, and ``python -m gpipe_repro.paper sweep --from SWEEP`` writes them again.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import astuple
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ..typed_csv import columns
from .artefact import Artefact, make, publish
from .registry import ARTEFACTS
from .sweep import Sweep, checks, console_table
from .sweep_rows import SweepRow


def canonical(task_overrides: list[str], experiment: str) -> bool:
    """Whether a sweep's command-line overrides are exactly the experiment's make target's."""
    return [
        o for o in task_overrides if not o.startswith(("logger=", "hydra", "sweep.publish="))
    ] == [f"experiment={experiment}"]


class GatherCallback(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(config.hydra.sweep.dir)
        if not any(sweep.glob("*/metrics.json")):
            return
        experiment = config.get("experiment_name")
        task = [str(o) for o in OmegaConf.to_container(config.hydra.overrides.task) or []]
        command = " ".join(["gpipe-run -m", *task])
        table = Sweep(str(experiment or "sweep"))
        again = f"python -m gpipe_repro.paper sweep --from {sweep}"
        rows: list[SweepRow] = []
        written: list[Path] = []
        try:  # whatever a job did, its row is in the table (``sweep._safe_row``)
            report, written = make(table, sweep, sweep, argparse.Namespace(), command)
            rows = report.rows
            lines = [console_table(rows), *checks(rows), ""]
            lines.append(f"table: {sweep}/results.md (.csv, .png)")
        except Exception as err:  # noqa: BLE001 - reporting must not lose the sweep
            lines = [f"the sweep's table failed: {_one_line(err)}; re-run it: {again}"]
        lines.append(f"runs:  {sweep}/<job>/ (metrics.json, trace.json, timeline.png)")
        art: Artefact[Any] | None = table if written else None
        own = ARTEFACTS.get(str(experiment))
        if own is not None and own.sweep and not isinstance(own, Sweep):
            art = None  # published only if it is written
            try:
                written = make(own, sweep, sweep / "report", argparse.Namespace(), command)[1]
                art = own
                lines.append(f"{experiment} report: {sweep}/report/")
            except Exception as err:  # noqa: BLE001 - reporting must not lose the sweep
                lines.append(
                    f"{experiment} report failed: {_one_line(err)}; re-run it: "
                    f"python -m gpipe_repro.paper {experiment} --from {sweep}"
                )
        lines += _publish(config, task, experiment, art, written)
        lines += _wandb(config, sweep, rows, experiment)
        print("\n".join(lines), file=sys.stdout, flush=True)
        failed = sum(r.status in ("failed", "diverged") for r in rows)
        stopped = sum(r.status == "interrupted" for r in rows)
        if failed:
            print(
                f"gpipe-run: {failed} of {len(rows)} jobs failed (see the error column)",
                file=sys.stderr,
            )
        if stopped:
            print(
                f"gpipe-run: {stopped} job(s) interrupted; to finish the sweep: the same command with "
                f"hydra.sweep.dir={sweep} sweep.skip_done=true train.resume=auto",
                file=sys.stderr,
            )


def _publish(
    config: DictConfig,
    task: list[str],
    experiment: Any,
    art: Artefact[Any] | None,
    written: list[Path],
) -> list[str]:
    """The make target's sweep (``gpipe-run -m experiment=NAME``) publishes its report, unless
    ``sweep.publish=false`` (``make demo``: the sweep's folder only; ``make demo-publish``
    publishes); every other sweep leaves ``reports/`` as it is and says why."""
    if not experiment:
        return []
    if not canonical(task, str(experiment)):
        extra = " ".join(o for o in task if o != f"experiment={experiment}")
        return [
            f"reports/{experiment}/ left as it is: this sweep adds {extra} to "
            f"`gpipe-run -m experiment={experiment}`; its report is the one above"
        ]
    if not OmegaConf.select(config, "sweep.publish", default=True):
        return [f"reports/{experiment}/ left as it is (sweep.publish=false); the report is above"]
    if art is None:
        return []
    return [publish(art, written, Path(config.hydra.runtime.cwd))]


def _one_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _wandb(config: DictConfig, sweep: Path, rows: list[SweepRow], experiment: Any) -> list[str]:
    """The sweep's summary run (one per sweep, offline by default)."""
    from ..config import LoggerConfig
    from ..wandb_logger import log_sweep_table, wandb_group

    lg = config.get("logger") or {}
    spec = LoggerConfig(
        name=str(lg.get("name", "none")),
        project=str(lg.get("project", "gpipe-repro")),
        mode=str(lg.get("mode", "offline")),
        group=lg.get("group"),
    )
    values = [list(astuple(r)) for r in rows]
    try:
        group = wandb_group(spec, experiment, sweep)
        wb = log_sweep_table(spec, sweep, columns(SweepRow), values, group)
    except Exception as err:  # noqa: BLE001 - reporting must not lose the sweep
        return [f"wandb summary run failed: {err}"]
    if not wb:
        return []
    return [
        f"wandb: offline runs in {sweep}/*/wandb/; upload with "
        f"`wandb sync {sweep}/*/wandb/offline-run-* {sweep}/wandb/offline-run-*`"
    ]
