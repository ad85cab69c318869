"""Table 4 as an artefact: pre-train once (cached), fine-tune every target pretrained and from scratch.

    python -m gpipe_repro.paper table4 --publish           # make table4: 5 seeds -> reports/table4/
    python -m gpipe_repro.paper table4 --quick             # make table4-quick: 2 seeds, short runs
    python -m gpipe_repro.paper table4 --from WORK         # the report of a work folder's runs

GPipe §4 (Table 4): AmoebaNet-B pre-trained on ImageNet, its softmax replaced by a randomly
initialised one with the target's classes, fine-tuned on each target with the same hyper-parameters,
flip + cutout; the mean of 5 runs. Here the same recipe runs small and offline (experiments:
``run``): one pre-training, cached by its config, then every target x {pretrained, scratch} x seed
as its own ``gpipe-run`` job (``runner.jobs``), ``--jobs`` at a time, and the lead target again at
K = 2. A second invocation reuses every finished run. Collect: every run (``results.RunRow``:
``runs.csv``) and the plan as run (``plan.json``). Render: ``results.csv`` (over seeds),
``table4.md``, ``table4.png`` (``text``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...measure.transfer_jobs import CANONICAL, QUICK, run_table, sigterm, write_plan
from ...runner.jobs import read_job
from ..artefact import Artefact, Report
from ..provenance import Provenance
from ..rows import write_csv
from ..runs import read_run
from .results import GroupRow, RunRow, group, group_rows, load_runs
from .text import markdown, plot


def _pretrain(pt: dict[str, Any]) -> dict[str, Any]:
    """A pre-training of the plan with what its own files say: how it ended, its accuracy, its data."""
    pt = dict(pt)
    folder = Path(pt.get("folder", ""))
    m, job = read_run(folder), read_job(folder) or {}
    data = (job.get("meta") or {}).get("data") or {}
    pt.update(
        status=m.status if (folder / "metrics.json").exists() else "missing",
        steps=m.steps,
        batch_size=m.batch_size,
        accuracy=m.eval.accuracy if m.eval else None,
        samples=m.eval.samples if m.eval else None,
        seconds=job.get("seconds"),
        data={"name": data.get("name"), "classes": data.get("classes")},
        D=(job.get("meta") or {}).get("D"),
    )
    return pt


class Table4(Artefact[RunRow]):
    """Table 4: transfer learning, fine-tuned vs trained from scratch (GPipe §4)."""

    name = folder = "table4"
    row = RunRow
    command = "make table4"
    csv = "runs.csv"
    siblings = ("plan.json",)

    def options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--quick",
            action="store_true",
            help=f"{QUICK.name}: {len(QUICK.seeds)} seeds, short runs",
        )
        parser.add_argument(
            "--jobs",
            type=int,
            default=max(1, min(4, os.cpu_count() or 1)),
            help="cores to keep busy: runs at a time (a K=2 run takes 2); default min(4, cores)",
        )
        parser.add_argument(
            "--timeout-s", type=float, default=3600.0, help="time limit of each run"
        )
        parser.add_argument("--wandb", action="store_true", help="log each run to wandb (offline)")

    def check(self, opts: argparse.Namespace) -> str | None:
        return f"--jobs={opts.jobs} must be >= 1" if opts.jobs < 1 else None

    def variant(self, opts: argparse.Namespace) -> str | None:
        return QUICK.name if getattr(opts, "quick", False) else None

    def work(self, opts: argparse.Namespace) -> Path:
        return Path("outputs") / (self.variant(opts) or CANONICAL.name)

    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[RunRow]:
        work = source or out
        if source is None:
            signal.signal(signal.SIGTERM, sigterm)  # stop like Ctrl-C: the finished runs are kept
            variant = QUICK if opts.quick else CANONICAL
            run_table(variant, work, slots=opts.jobs, timeout_s=opts.timeout_s, wandb=opts.wandb)
        try:
            plan = json.loads((work / "plan.json").read_text())
        except (OSError, ValueError):
            raise UserError(f"{work}/plan.json not found; run without --from first") from None
        plan["pretrain"] = _pretrain(plan.get("pretrain") or {})
        plan["rungs"] = {D: _pretrain(pt) for D, pt in (plan.get("rungs") or {}).items()}
        write_plan(out, plan)
        runs, envs = load_runs(work)
        return Report(runs, Provenance.of_jobs(envs, work))

    def render(self, report: Report[RunRow], out: Path) -> list[Path]:
        plan = json.loads((out / "plan.json").read_text())
        groups = group(report.rows, [t["key"] for t in plan.get("targets") or []])
        csv, md, png = out / "results.csv", out / "table4.md", out / "table4.png"
        write_csv(csv, GroupRow, group_rows(groups))
        md.write_text(markdown(plan, groups, report.rows, report.provenance))
        seeds = len(plan.get("seeds") or [])
        title = f"Table 4 ({plan.get('variant', '?')}): fine-tuned vs from scratch, mean ± sd over {seeds} seeds (dots: each seed)"
        plot(groups, png, title, (plan.get("ladder") or {}).get("target", ""))
        return [csv, md, png]


ARTEFACT = Table4()
