"""Tables 2 and 3 of the paper (both its §3) beside ours: normalised throughput per K and M, and why.

Experiments: ``gpipe-run -m experiment=tableN_amoebanet`` and ``..._transformer`` (each published to
``reports/tableN_*/`` by the sweep callback), every cell labelled with its source (measured |
simulated), hardware and batch mode. Collect: those sweeps' typed rows, and what the simulator says
under other assumptions (``paper.throughput_sim``: partitions, links, the planner's pick per K). Rows:
each *series* — one model on one hardware with one batch mode — normalised to its first cell whose
batch fits (the paper's reference K = 2, M = 1 for Table 2, K = 2 for Table 3, where it fits); the
paper's numbers are re-normalised to that same cell before any ratio.

Why a cell differs is read from the numbers. With ``b`` the batch, ``step`` the step time, ``busy_k``
stage k's compute time in a step, ``c = sum(busy) / b`` the compute per sample and
``u = sum(busy) / (K * step)`` the share of the K devices' time spent computing, the throughput is
``b / step = K * u / c``, so against the reference cell (r) exactly

    normalised = bound x balance x overlap x transfers x efficiency

- ``bound`` = (K (1 - bubble)) / (same for r), bubble = (K - 1)/(M + K - 1): the fill-drain bubble
  alone (§2.3);
- ``balance`` = (mean busy / max busy) / (same for r): the slowest stage's extra work;
- ``overlap`` = o / o_r, o = (M + K - 1) w / (M w + (K - 1)(w - r)) with w and r the slowest stage's
  work and recompute per micro-batch: the early recompute (§2.3: a stage recomputes before the
  gradient arrives), which shortens the drain from K - 1 full micro-batches to K - 1 without their
  recompute; 1 without remat, or where the sweep recorded no recompute time;
- ``transfers`` = (u / ((1 - bubble) * mean/max * o)) / (same for r): what the above do not explain —
  boundary transfers, waits, the optimiser step and per-step overhead;
- ``efficiency`` = c_r / c: compute per sample against the reference (per-micro-batch efficiency).

The sentence for each cell names the factors furthest from 1 and compares our share of the bound
with the paper's. A cell simulated on a published profile that ``make validate-hw`` finds not
anchored well enough for it carries a mark and a footnote (``validate_hw.flags``, read at render).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..engine.schedule import bubble_fraction
from ..errors import UserError
from .artefact import REPORTS, Artefact, Report
from .numbers import throughput
from .provenance import Provenance
from .rows import read_csv, write_csv
from .sweep import SweepRow
from .throughput_findings import markdown, plot
from .throughput_gpu import gpu_cells
from .throughput_rows import Cell, ThroughputRow
from .throughput_sim import SimRow, studies
from .validate_hw.flags import anchoring

SENSITIVITY = "sensitivity.csv"  # the simulator's studies (throughput_sim.SimRow)


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


def _parts(c: Cell) -> tuple[float, float, float, float, float]:
    """(schedule share 1 - bubble, balance mean/max, early-recompute overlap o, the rest, compute
    per sample) of one cell."""
    r = c.row
    sched = 1 - bubble_fraction(r.K, r.M)
    step, batch = float(r.step_s or 0), float(r.batch_size or 1)
    if len(c.busy) != r.K or max(c.busy) <= 0:
        return sched, 1.0, 1.0, 1.0, step / batch
    bal = statistics.fmean(c.busy) / max(c.busy)
    slow = c.busy.index(max(c.busy))
    w = c.busy[slow] / r.M
    rec = c.recompute[slow] / r.M if len(c.recompute) == r.K else 0.0
    o = (r.M + r.K - 1) * w / (r.M * w + (r.K - 1) * (w - rec))
    u = sum(c.busy) / (r.K * step)
    return sched, bal, o, u / (sched * bal * o), sum(c.busy) / batch


FACTORS = ("bound", "balance", "overlap", "transfers", "efficiency")


def decompose(c: Cell, ref: Cell) -> dict[str, float]:
    """``normalised = bound x balance x overlap x transfers x efficiency`` against the reference."""
    s, b, o, t, per = _parts(c)
    s0, b0, o0, t0, per0 = _parts(ref)
    return dict(
        zip(FACTORS, ((c.row.K * s) / (ref.row.K * s0), b / b0, o / o0, t / t0, per0 / per))
    )


_WHAT = {
    "balance": "partition imbalance",
    "overlap": "early-recompute overlap",
    "transfers": "transfers, waits, optimiser step and overhead",
    "efficiency": "per-sample compute efficiency",
}


def explain(r: ThroughputRow, ref: ThroughputRow, f: dict[str, float], paper: float | None) -> str:
    """One sentence from the numbers: how far the bubble bound goes, what moves us off it, and the
    paper (``paper``: re-normalised to our reference cell)."""
    ours = float(r.normalized or 0)
    if (r.K, r.M) == (ref.K, ref.M):
        return "the reference cell (1 by definition)"
    parts = [f"bubble bound {f['bound']:.2f}"]
    movers = sorted(_WHAT, key=lambda k: -abs(math.log(max(f[k], 1e-9))))
    for k in movers:
        if abs(math.log(max(f[k], 1e-9))) >= 0.03:
            detail = (
                f" (micro-batch {r.micro_batch} vs {ref.micro_batch})" if k == "efficiency" else ""
            )
            parts.append(f"{_WHAT[k]} {f[k]:.2f}{detail}")
    text = f"ours {ours:.2f} = " + " × ".join(parts)
    if paper is not None:
        share_p, share_o = paper / f["bound"], ours / f["bound"]
        text += f"; paper {paper:.2f} = {share_p:.0%} of the bound, ours {share_o:.0%}"
    return text


def reference(cs: Sequence[Cell], paper_ref: tuple[int, int]) -> Cell | None:
    """A series' normaliser: the paper's reference cell if it ran and its batch fits, else the
    first (by K, then M) that does; a cell whose batch does not fit never is one."""
    fits = sorted(
        (c for c in cs if c.ok and c.row.fits_memory is not False), key=lambda c: (c.row.K, c.row.M)
    )
    return next((c for c in fits if (c.row.K, c.row.M) == paper_ref), fits[0] if fits else None)


def build_rows(
    cells: Sequence[Cell], table: int, paper_ref: tuple[int, int]
) -> list[ThroughputRow]:
    """Every cell normalised within its series, with the paper's number re-normalised to the same
    cell, the ratio and the reasons."""
    out = []

    def series(c: Cell) -> tuple[str, str, str, str]:
        return c.row.model, c.row.source, c.row.hardware, c.row.batch_mode

    for key in sorted({series(c) for c in cells}):
        cs = [c for c in cells if series(c) == key]
        ref = reference(cs, paper_ref)
        printed = throughput(table, key[0])
        base = printed.get((ref.row.K, ref.row.M)) if ref else None
        for c in sorted(cs, key=lambda c: (c.row.M, c.row.K)):
            paper = printed.get((c.row.K, c.row.M))
            r = replace(c.row, paper_normalized=paper / base if paper and base else None)
            if ref is None:
                why = f"failed: {c.error}" if not c.ok else "no cell of this series fits"
                out.append(replace(r, why=why))
                continue
            if not c.ok:
                out.append(replace(r, why=f"failed: {c.error}"))
                continue
            r.reference = f"K={ref.row.K}, M={ref.row.M}"
            r.normalized = float(r.throughput or 0) / float(ref.row.throughput or 1)
            r.ratio = r.normalized / r.paper_normalized if r.paper_normalized else None
            f = decompose(c, ref)
            r.bound, r.balance, r.overlap, r.transfers, r.efficiency = (f[k] for k in FACTORS)
            r.why = explain(r, ref.row, f, r.paper_normalized)
            if (ref.row.K, ref.row.M) != paper_ref:
                r.why = f"normalised to {r.reference} (the first cell that fits); " + r.why
            if r.fits_memory is False:
                r.why = "its batch does not fit the device; " + r.why
            if r.config:
                r.why = f"the planner's pick: {r.config}; " + r.why
            out.append(r)
    return out


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
        self.profile, self.studies = profile, studies  # the simulator's studies (throughput_sim)
        self.runs = [[f"experiment={e}"] for e in self.experiments]
        self.hw = REPORTS / "hw"  # the validate-hw report whose judgement marks the cells

    def options(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--studies",
            choices=("on", "off"),
            default="on",
            help=f"simulate {', '.join(self.studies)} on {self.profile} (paper/throughput_sim.py)",
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
        cells += gpu_cells(self.table, self.runs)  # profiles make gpu-check committed (if any)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / SENSITIVITY, SimRow, sims)
        rows = build_rows(cells, self.table, self.reference)
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
            report.rows, report.provenance, self.table, self.title, self.names, ref, anchors, sims,
            self.profile,
        )  # fmt: skip

    def plot(self, report: Report[ThroughputRow], path: Path) -> None:
        plot(report.rows, self.table, self.names, self.reference[1], path)


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
