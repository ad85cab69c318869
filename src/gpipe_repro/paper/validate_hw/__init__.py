"""The hardware validation: every published profile's anchors simulated, and this CPU's roofline.

    python -m gpipe_repro.paper validate-hw --publish    # make validate-hw -> reports/hw/
    python -m gpipe_repro.paper validate-hw --no-cpu     # the anchors alone (seconds; not published)

Every published profile (``sim.hardware.published_names``) with its anchors (``sim.anchors.check``),
the experiments that simulate on them (``uses``) and this CPU's roofline against its measured layer
costs (``measure.roofline_check``); summary: ``profiles``; page: ``templates/hw.md.j2``, ``hw.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ...config.compose import CONF_DIR
from ...measure.roofline_check import measure_cpu, write_profile
from ...sim.anchors import MIN_ANCHORS, TOLERANCE, check
from ...sim.hardware import load_profile, published_names
from ...typed_csv import read_csv, write_csv
from ..artefact import Artefact, Report
from ..claims import TARGETS_LEAD, Answer, targeted
from ..plot import figure
from ..provenance import Provenance
from ..stats import median
from ..template import render
from .hw_rows import AnchorRow, CpuRow, anchor_rows, cpu_rows
from .profiles import DeviceSummary, devices, kinds, rests_on
from .uses import UseRow, uses

CPU_HOW = (
    "This CPU as a roofline profile, from micro-benchmarks only (sim/measured/cpu.py),\n"
    "written by make validate-hw: its roofline is checked against the measured layer costs."
)
TITLE = "Published hardware profiles against published training throughputs"


class ValidateHw(Artefact[AnchorRow]):
    """Published hardware profiles against published training throughputs; this CPU's roofline
    against its measured costs."""

    name = "validate-hw"
    folder = "hw"
    row = AnchorRow
    command = "make validate-hw"
    siblings = ("devices.csv", "uses.csv", "cpu.csv", "cpu.yaml")
    page = "hw"
    in_process = True
    switch = (
        "no-cpu",
        "the published profiles alone: leave this CPU's roofline check out (seconds)",
    )

    def collect(
        self, source: Path | None, opts: argparse.Namespace, out: Path
    ) -> Report[AnchorRow]:
        names = published_names()
        rows = anchor_rows([r for name in names for r in check(load_profile(name))])
        write_csv(out / "devices.csv", DeviceSummary, devices(rows, names))
        write_csv(out / "uses.csv", UseRow, uses(CONF_DIR, names))
        for stale in ("cpu.csv", "cpu.yaml"):
            (out / stale).unlink(missing_ok=True)
        if not opts.no_cpu:
            hw, pairs = measure_cpu()
            write_csv(out / "cpu.csv", CpuRow, cpu_rows(pairs))
            write_profile(hw, out / "cpu.yaml", CPU_HOW)
        return Report(rows, Provenance.here())

    def markdown(self, report: Report[AnchorRow], out: Path) -> str:
        cpu = read_csv(out / "cpu.csv", CpuRow) if (out / "cpu.csv").exists() else []
        profile = OmegaConf.load(out / "cpu.yaml") if (out / "cpu.yaml").exists() else None
        summaries = read_csv(out / "devices.csv", DeviceSummary)
        s = summary(report.rows, summaries, read_csv(out / "uses.csv", UseRow), cpu)
        return render("hw", report.provenance, TITLE, answer(summaries), TARGETS_LEAD,
                      profile=profile, **s)  # fmt: skip

    def plot(self, report: Report[AnchorRow], path: Path) -> None:
        cpu = path.parent / "cpu.csv"
        plot(report.rows, read_csv(cpu, CpuRow) if cpu.exists() else [], path)


def answer(summaries: list[DeviceSummary]) -> list[Answer]:
    """The page's answer: per published profile, its target met or not and its worst anchor."""
    return [
        targeted("hw", "met" if d.enough and d.each else "not met", "Targets per device", d=d,
                 tol=TOLERANCE, least=MIN_ANCHORS)
        for d in summaries
    ]  # fmt: skip


def summary(
    rows: list[AnchorRow], summaries: list[DeviceSummary], used: list[UseRow], cpu: list[CpuRow]
) -> dict[str, Any]:
    """What the page says, from the CSVs' rows (``templates/hw.md.j2`` makes the tables): the
    targets per device, every anchor, what rests on each profile, this CPU's roofline per layer
    kind with its micro-batches and each kind's layer count."""
    ks = kinds(cpu)
    return {
        "tol": TOLERANCE,
        "least": MIN_ANCHORS,
        "devices": summaries,
        "anchors": rows,
        "verdicts": rests_on(summaries, used, ks),
        "kinds": ks,
        "sizes": sorted({r.micro_batch for r in cpu}),
        "layers": {(r.model, r.kind): r.layers for r in cpu},
        "median": median([e for k in ks for _, e in k.errors]),
    }


def plot(rows: list[AnchorRow], cpu: list[CpuRow], path: Path) -> None:
    panels = 2 if cpu else 1
    with figure(path, 1, panels, figsize=(6 * panels, 4.2), squeeze=False) as (fig, axes):
        ax = axes[0][0]
        ys = list(range(len(rows)))
        colors = ["tab:blue" if r.role == "fit" else "tab:orange" for r in rows]
        ax.barh(ys, [100 * r.error for r in rows], color=colors)
        ax.set_yticks(ys, [f"{r.device} {r.model} b{r.batch}" for r in rows], fontsize=7)
        ax.axvspan(-100 * TOLERANCE, 100 * TOLERANCE, color="green", alpha=0.1)
        ax.invert_yaxis()
        ax.set(xlabel="simulated / published - 1 (%)", title="anchors (blue: fit, orange: check)")
        ax.grid(alpha=0.3)
        if cpu:
            ax = axes[0][1]
            for k in kinds(cpu):
                ns, es = zip(*k.errors)
                ax.plot(ns, [100 * e for e in es], "o-", label=f"{k.model} {k.kind}"[:40])
            sizes = sorted({r.micro_batch for r in cpu})
            ax.set_xscale("log")
            ax.set_xticks(sizes, [str(n) for n in sizes])
            ax.minorticks_off()
            ax.axhspan(-100 * TOLERANCE, 100 * TOLERANCE, color="green", alpha=0.1)
            ax.set(
                xlabel="micro-batch",
                ylabel="roofline / measured - 1 (%)",
                title="this CPU's roofline per layer kind",
            )
            ax.legend(fontsize=6)
            ax.grid(alpha=0.3)


ARTEFACT = ValidateHw()
