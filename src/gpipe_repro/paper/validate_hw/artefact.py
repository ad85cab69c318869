"""The hardware validation as an artefact: every published profile's anchors simulated, this CPU's roofline.

    python -m gpipe_repro.paper validate-hw --publish    # make validate-hw -> reports/hw/ (~1 min)
    python -m gpipe_repro.paper validate-hw --no-cpu     # the anchors alone (seconds; not published)

Experiments: every published profile of ``conf/hardware/`` (``sim.hardware.published_names``: a
YAML file a user adds is one) with its anchors, simulated by ``sim.anchors.check``; the experiments
that simulate on those profiles (``uses``); this CPU's roofline against its measured layer costs
(``measure.roofline``). Collect: ``results.csv`` (``rows.AnchorRow``), ``devices.csv``, ``uses.csv``,
``cpu.csv`` and ``cpu.yaml``. Render: ``text.markdown`` (``hw.md``, ``hw.png``), from those files alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...config.compose import CONF_DIR
from ...measure.roofline import measure_cpu, write_profile
from ...sim.anchors import check
from ...sim.hardware import load_profile, published_names
from ..artefact import Artefact, Report
from ..provenance import Provenance
from ..rows import read_csv, write_csv
from .rows import AnchorRow, CpuRow, DeviceSummary, anchor_rows, cpu_rows, devices
from .text import markdown, plot
from .uses import UseRow, uses

CPU_HOW = (
    "This CPU as a roofline profile, from micro-benchmarks only (sim/measured/cpu.py),\n"
    "written by make validate-hw: its roofline is checked against the measured layer costs."
)


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

    def render(self, report: Report[AnchorRow], out: Path) -> list[Path]:
        md, png = out / "hw.md", out / "hw.png"
        cpu = read_csv(out / "cpu.csv", CpuRow) if (out / "cpu.csv").exists() else []
        md.write_text(
            markdown(
                report.rows,
                read_csv(out / "devices.csv", DeviceSummary),
                read_csv(out / "uses.csv", UseRow),
                cpu,
                _cpu_profile(out / "cpu.yaml"),
                report.provenance,
            )
        )
        plot(report.rows, cpu, png)
        return [md, png]


def _cpu_profile(path: Path) -> str:
    """The CPU profile's measured fields in words (empty when it was not written)."""
    if not path.exists():
        return ""
    from omegaconf import DictConfig, OmegaConf

    p = OmegaConf.load(path)
    assert isinstance(p, DictConfig)
    return (
        f"peak {p['peak_flops_fp32'] / 1e9:.1f} GFLOP/s, copy {p['mem_bandwidth_Bps'] / 1e9:.1f} "
        f"GB/s, one operator call {p['op_min_s'] * 1e6:.1f} us"
    )


ARTEFACT = ValidateHw()
