"""Tables 2 and 3 of the paper (both its §3) beside ours: normalised throughput per K and M, and why.

Experiments: ``gpipe-run -m experiment=tableN_amoebanet`` and ``..._transformer`` (each published to
``reports/tableN_*/`` by the sweep callback). Collect: those sweeps' typed rows, the simulator's
studies (``studies.sensitivity``) and a committed GPU profile's series (``studies.gpu_series``).
Rows: each *series* (one model on one hardware with one batch mode) normalised the paper's way and
decomposed into the factors of ``paper.throughput_norm``. A cell simulated on a profile that ``make
validate-hw`` finds not anchored well enough carries a mark (``validate_hw.flags``, read at render).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ..errors import UserError
from ..studies.gpu_series import gpu_cells
from ..studies.published import throughput
from ..studies.sensitivity import SimRow, studies
from ..studies.throughput_rows import Cell, ThroughputRow
from ..typed_csv import read_csv, write_csv
from .artefact import REPORTS, Artefact, Report
from .claims import LEAD, answers
from .provenance import Provenance
from .sweep_rows import SweepRow
from .throughput_findings import markdown, plot
from .throughput_norm import build, renormalise
from .validate_hw.flags import anchoring

SENSITIVITY = "sensitivity.csv"  # the simulator's studies (sensitivity.SimRow)


def _floats(text: str | None) -> list[float]:
    return [float(x) for x in (text or "").split(";") if x]


def load(reports: Path, table: int, experiments: Sequence[str]) -> list[Cell]:
    """The rows of the table's published sweeps (``reports/tableN_*/results.csv``); a failed cell
    (one that does not fit its device, say) is kept with its one-line error."""
    cells, seen = [], set()
    for name in experiments:
        path = reports / name / "results.csv"
        for r in read_csv(path, SweepRow) if path.exists() else []:
            if not throughput(table, str(r.model)) or r.status not in ("ok", "failed"):
                continue
            ok = r.status == "ok"
            row = ThroughputRow(
                table,
                str(r.model),
                int(r.K or 0),
                int(r.M or 0),
                r.batch_size,
                r.batch_mode or "fixed",
                r.micro_batch if ok else None,
                r.source or "measured",
                r.hardware or "?",
                r.fits_memory,
                r.step_time_s if ok else None,
                r.throughput if ok else None,
            )
            key = (row.model, row.source, row.hardware, row.batch_mode, row.K, row.M)
            if key not in seen:  # an engine sweep measures each cell once per hardware label
                seen.add(key)
                busy, rec = _floats(r.stage_busy_s), _floats(r.stage_recompute_s)
                cells.append(Cell(row, busy, ok, r.error or "", rec))
    return cells


class Throughput(Artefact[ThroughputRow]):
    """Tables 2 and 3: normalised throughput per K and M beside the paper's (GPipe §3)."""

    row = ThroughputRow
    siblings = (SENSITIVITY,)

    def __init__(
        self,
        table: int,
        title: str,
        names: dict[str, str],
        reference: tuple[int, int],
        profile: str,
        studies: tuple[str, ...],
    ):
        self.table, self.title, self.names, self.reference = table, title, names, reference
        self.name = self.folder = self.page = f"table{table}"
        self.command = f"make table{table}"
        self.experiments = [f"table{table}_amoebanet", f"table{table}_transformer"]
        self.profile, self.studies = profile, studies  # the simulator's studies (sensitivity)
        self.runs = [[f"experiment={e}"] for e in self.experiments]
        self.hw = REPORTS / "hw"  # the validate-hw report whose judgement marks the cells

    def options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--studies",
            choices=("on", "off"),
            default="on",
            help=f"simulate {', '.join(self.studies)} on {self.profile} (studies/sensitivity.py)",
        )

    @property
    def about(self) -> str:
        return self.title

    def variant(self, opts: argparse.Namespace) -> str | None:
        return "no_studies" if getattr(opts, "studies", "on") == "off" else None

    def collect(
        self, source: Path | None, opts: argparse.Namespace, out: Path
    ) -> Report[ThroughputRow]:
        reports = source or REPORTS
        cells = load(reports, self.table, self.experiments)
        if not cells:
            raise UserError(
                f"no results for table {self.table}: run gpipe-run -m experiment={self.experiments[0]} "
                f"and experiment={self.experiments[1]} first ({reports}/table{self.table}_*/results.csv)"
            )
        sims: list[SimRow] = []
        if getattr(opts, "studies", "on") == "on":
            sims, planned = studies(self.table, self.runs, self.profile, self.studies)
            cells += planned
        # the profiles make gpu-check committed beside these reports (if any)
        cells += gpu_cells(self.table, self.runs, reports / "gpu" / "profiles")
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / SENSITIVITY, SimRow, sims)
        rows = build(cells, self.table)
        found = [reports / e for e in self.experiments if (reports / e / "results.csv").exists()]
        prov = Provenance.merge([Provenance.load(f) for f in found], ", ".join(map(str, found)))
        return Report(rows, prov)

    def markdown(self, report: Report[ThroughputRow], out: Path) -> str:
        """The page, with the simulator's studies read back from their CSV and validate-hw's
        judgement of the published profiles."""
        K, M = self.reference
        ref = f"K = {K}, M = {M}" if self.table == 2 else f"K = {K}"
        pairs = [(r.model, r.hardware) for r in report.rows if r.source == "simulated"]
        anchors = anchoring([p for p in pairs if not p[1].startswith("measured")], self.hw)
        sims = read_csv(out / SENSITIVITY, SimRow) if (out / SENSITIVITY).exists() else []
        return markdown(
            renormalise(report.rows), report.provenance, self.table, self.title, self.names, ref, anchors, sims,
            self.profile, answers(self.folder, out), LEAD,
        )  # fmt: skip

    def plot(self, report: Report[ThroughputRow], path: Path) -> None:
        plot(renormalise(report.rows), self.table, self.names, self.reference[1], path)


TABLE2 = Throughput(
    2,
    "Table 2 — normalised training throughput on TPUs (GPipe §3)",
    {"amoebanet_d": "AmoebaNet-D(18, 256)", "transformer_lm": "Transformer-48"},
    (2, 1),
    "tpu_v3",
    ("partition", "planner", "efficiency"),
)
TABLE3 = Throughput(
    3,
    "Table 3 — normalised throughput on GPUs without NVLink, M = 32 (GPipe §3)",
    {"amoebanet_d": "AmoebaNet-D(18, 128)", "transformer_lm": "Transformer-24"},
    (2, 32),
    "p100_pcie",
    ("partition", "link", "efficiency"),
)
