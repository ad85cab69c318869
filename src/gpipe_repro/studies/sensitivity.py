"""Tables 2 and 3 under other assumptions than the sweeps': what the simulator says (GPipe §3).

Each model is built on the meta device and costed once by the table's published profile; every
variant is one simulated step (``runplan.costing.simulate_plan``) at the sweep's fixed batch, timing
only (the sweeps' ``fits`` flag checks memory). The studies:

- **partition** (AmoebaNet): the paper blames its sub-linear scaling on imbalanced cells (§2.2).
  The same layers cut by time (the sweeps' cut), by parameters and into equal layers per stage.
- **link** (Table 3): "communication is not the bottleneck". The step under a free link, the
  profile's, a direct path, a quarter and a sixteenth of its bandwidth, and one PCIe shared by every
  transfer (each directed link gets 1 / (2 (K - 1)) of it); ``vs_free``: over the free link's.
- **efficiency**: per-sample compute over the micro-batch, why more micro-batches per stage help.
  Every measured micro-batch on this CPU and on the profile; then the sweeps' cells on this CPU as
  measured, and with the smallest micro-batch's per-sample cost kept above it.
- **planner** (Table 2): the planner's best configuration per K (``search.scan``), as cells of an
  "adjusted to fit memory" series of the main table.

Cells are normalised to the variant's own K = 2 at the table's reference M; the per-sample curve
to its largest micro-batch.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..config import RunConfig
from ..config.compose import compose
from ..engine import balance_by_cost
from ..engine.events import busy_time
from ..runplan.costing import measured_sizes, run_hardware, simulate_plan
from ..runplan.plan import ModelPlan, plan_model
from ..search.candidate import Candidate
from ..search.choose import search_space
from ..search.scan import search
from ..sim import CostModel, Hardware, LayerCost, Link, SimResult, stage_costs
from ..sim.measured import MeasuredCosts
from .published import throughput
from .throughput_rows import Cell, ThroughputRow

__all__ = ["SimRow", "studies", "equal_layers"]


@dataclass
class SimRow:
    """One simulated variant of a table's cell."""

    table: int
    model: str
    study: str  # partition | link | efficiency | extrapolation
    variant: str
    K: int
    M: int
    batch_size: int
    micro_batch: int
    balance: str
    boundary_bytes: str  # per stage, one micro-batch's activation (its gradient is as large)
    step_s: float
    throughput: float
    imbalance: float  # slowest stage's busy time over the mean
    normalized: float | None = None  # to the same variant's K = 2 at the table's reference M
    paper_normalized: float | None = None
    vs_free: float | None = None  # link study: throughput over the free link's


@dataclass
class Model:
    """A table's model on its published profile, costed once."""

    spec: RunConfig
    plan: ModelPlan
    hw: Hardware
    costs: CostModel


def model(overrides: Sequence[str], hardware: str, plan: ModelPlan | None = None) -> Model:
    """The experiment's model (``overrides``: ``experiment=...`` and any more) on ``hardware``;
    ``plan``: the same model already planned on another hardware (the plan does not depend on it)."""
    spec = compose([*overrides, "backend=sim", f"hardware={hardware}"], cuda_available=False)
    plan = plan or plan_model(spec)
    hw, costs = run_hardware(spec, plan)
    return Model(spec, plan, hw, costs)


def at(spec: RunConfig, K: int, M: int) -> RunConfig:
    """``spec`` at K stages and M micro-batches."""
    return replace(spec, pipeline=replace(spec.pipeline, K=K, M=M))


def cut_by_time(costs: CostModel, mb: int, K: int) -> list[int]:
    """The sweeps' partition: the layers' forward + backward time at micro-batch ``mb`` in K cells."""
    return balance_by_cost([c.forward_s + c.backward_s for c in costs.layer_costs(mb)], K)


def recompute_s(res: SimResult, K: int) -> list[float]:
    """Each stage's recompute time in the simulated step ``res``."""
    return [
        busy_time(e for e in res.events if (e.stage, e.action) == (k, "recompute"))
        for k in range(K)
    ]


def _step(
    m: Model, K: int, M: int, balance: Sequence[int], mb: int, costs: CostModel | None = None
) -> SimResult:
    return simulate_plan(at(m.spec, K, M), m.hw, costs or m.costs, balance, mb)


def _row(
    m: Model,
    table: int,
    study: str,
    variant: str,
    K: int,
    M: int,
    bal: Sequence[int],
    res: SimResult,
) -> SimRow:
    batch = m.spec.train.batch_size
    st = stage_costs(m.costs.layer_costs(batch // M), bal)
    return SimRow(
        table, m.spec.model.name, study, variant, K, M, batch, batch // M,
        "-".join(map(str, bal)), ";".join(str(s.out_bytes) for s in st[:-1]), res.step_s,
        batch / res.step_s, max(res.busy_s) / statistics.fmean(res.busy_s),
    )  # fmt: skip


def equal_layers(L: int, K: int) -> list[int]:
    """L layers in K cells of L // K, the first L % K cells one more."""
    return [L // K + (k < L % K) for k in range(K)]


def partitions(m: Model, table: int, Ks: Sequence[int], Ms: Sequence[int]) -> list[SimRow]:
    """The partition study (module doc)."""
    layers = m.plan.layers
    params = [float(sum(p.numel() for p in layer.parameters())) for layer in layers]
    rows = []
    for M in Ms:
        mb = m.spec.train.batch_size // M
        for K in Ks:
            cuts = {
                "by time (the sweeps')": cut_by_time(m.costs, mb, K),
                "by parameters": balance_by_cost(params, K),
                "equal layers": equal_layers(len(layers), K),
            }
            for name, bal in cuts.items():
                rows.append(_row(m, table, "partition", name, K, M, bal, _step(m, K, M, bal, mb)))
    return _normalise(rows, table, min(Ks), min(Ms) if table == 2 else max(Ms))


def efficiency(cpu: Model, pub: Model, table: int) -> list[SimRow]:
    """The efficiency study's per-sample curve (module doc): one K = 1, M = 1 row per micro-batch
    the profile measured, on this CPU (``cpu``) and on the published profile (``pub``)."""
    sizes = measured_sizes(cpu.spec, cpu.plan)
    L = len(cpu.plan.layers)
    rows = []
    threads = cpu.spec.train.threads
    here = f"this CPU ({threads} thread{'s' if threads > 1 else ''})"
    for name, m in ((here, cpu), (pub.hw.name, pub)):
        for n in sizes:
            t = sum(c.forward_s + c.backward_s for c in m.costs.layer_costs(n))
            rows.append(
                SimRow(table, m.spec.model.name, "efficiency", name, 1, 1, n, n, str(L), "", t,
                       n / t, 1.0)
            )  # fmt: skip
        top = rows[-1].throughput
        for r in rows[-len(sizes) :]:
            r.normalized = r.throughput / top
    return rows


def kept_above(costs: MeasuredCosts, n0: int) -> MeasuredCosts:
    """``costs`` with the per-sample cost of micro-batch ``n0`` kept above it."""
    p = costs.profile
    kept = replace(p, sizes=[n0], costs={n0: p.costs[n0]}, raw=None)
    return replace(costs, profile=kept, extrapolate="proportional")


def extrapolation(cpu: Model, table: int, Ks: Sequence[int], Ms: Sequence[int]) -> list[SimRow]:
    """The efficiency study's cells (module doc): measured, and constant above the smallest size."""
    if not isinstance(cpu.costs, MeasuredCosts):
        raise TypeError(f"the extrapolation study needs measured costs, got {type(cpu.costs)}")
    sizes = measured_sizes(cpu.spec, cpu.plan)
    variants = {
        f"measured at micro-batches {sizes[0]}-{sizes[-1]}": cpu.costs,
        f"per-sample cost of {sizes[0]} kept above it": kept_above(cpu.costs, sizes[0]),
    }
    rows = []
    for M in Ms:
        mb = cpu.spec.train.batch_size // M
        for K in Ks:
            bal = cut_by_time(cpu.costs, mb, K)
            for name, costs in variants.items():
                res = _step(cpu, K, M, bal, mb, costs)
                rows.append(_row(cpu, table, "extrapolation", name, K, M, bal, res))
    return _normalise(rows, table, min(Ks), min(Ms) if table == 2 else max(Ms))


class _OnLink:
    """``costs`` with another link (the same per-layer costs and overheads)."""

    def __init__(self, costs: CostModel, link: Link) -> None:
        self.link, self.inner = link, costs
        self.overhead_s, self.step_overhead_s = costs.overhead_s, costs.step_overhead_s

    @property
    def recompute_overhead_s(self) -> float:
        return self.inner.recompute_overhead_s

    def layer_costs(self, micro_batch: int) -> list[LayerCost]:
        return self.inner.layer_costs(micro_batch)


def links(m: Model, table: int, Ks: Sequence[int], M: int) -> list[SimRow]:
    """The link study (module doc), partition by time."""
    base = m.costs.link
    mb = m.spec.train.batch_size // M
    rows = []
    for K in Ks:
        bal = cut_by_time(m.costs, mb, K)
        share = 2 * (K - 1)
        variants = {
            "free link": Link(0.0, math.inf),
            f"the profile's ({base.bandwidth_Bps / 1e9:g} GB/s, {base.hops} hops)": base,
            "direct path (1 hop)": replace(base, hops=1),
            "1/4 of the bandwidth": replace(base, bandwidth_Bps=base.bandwidth_Bps / 4),
            "1/16 of the bandwidth": replace(base, bandwidth_Bps=base.bandwidth_Bps / 16),
            "one shared PCIe (all transfers at once)": replace(
                base, bandwidth_Bps=base.bandwidth_Bps / share
            ),
        }
        for name, link in variants.items():
            res = _step(m, K, M, bal, mb, _OnLink(m.costs, link))
            rows.append(_row(m, table, "link", name, K, M, bal, res))
        free = rows[-len(variants)].throughput
        for r in rows[-len(variants) :]:
            r.vs_free = r.throughput / free
    return _normalise(rows, table, min(Ks), M)


def _normalise(rows: list[SimRow], table: int, K0: int, M0: int) -> list[SimRow]:
    for r in rows:
        ref = next(q for q in rows if (q.variant, q.K, q.M) == (r.variant, K0, M0))
        r.normalized = r.throughput / ref.throughput
        r.paper_normalized = throughput(table, r.model).get((r.K, r.M))
    return rows


def planner_cells(m: Model, table: int, Ks: Sequence[int], max_m: int) -> list[Cell]:
    """The planner's pick per K (module doc) as cells of the ``planner`` series; a K where
    nothing fits is a failed cell that says so."""
    space = search_space(m.spec, m.plan, m.hw.memory_bytes, m.costs)
    cells = []
    for K in Ks:

        def sim(c: Candidate, K: int = K) -> tuple[float, float]:
            if (c.K, c.replicas) != (K, 1):  # another K or data parallelism: never the pick
                return math.inf, 0.0
            r = _simulate_pick(m, space.costs, c)
            return r.step_s, r.bubble_fraction

        ranked, _ = search(space, K, None, max_m, 2, sim)
        picks = [c for c in ranked if (c.K, c.replicas) == (K, 1) and math.isfinite(c.step_s)]
        row = ThroughputRow(
            table, m.spec.model.name, K, 0, None, "planner", None, "simulated", m.hw.name,
            None, None, None,
        )  # fmt: skip
        if not picks:
            cells.append(
                Cell(row, [], False, f"the planner finds no configuration of K={K} that fits")
            )
            continue
        c = picks[0]
        res = _simulate_pick(m, space.costs, c)
        row = replace(
            row, M=c.M, batch_size=c.batch_size, micro_batch=c.micro_batch, fits_memory=True,
            step_s=res.step_s, throughput=c.batch_size / res.step_s,
            config=f"{c.schedule}, remat {c.remat}, balance {'-'.join(map(str, c.balance))}",
        )  # fmt: skip
        cells.append(Cell(row, res.busy_s, True, "", recompute_s(res, K)))
    return cells


def studies(
    table: int, runs: Sequence[Sequence[str]], hardware: str, which: Sequence[str]
) -> tuple[list[SimRow], list[Cell]]:
    """The studies ``which`` (partition, link, planner, efficiency) of each model (``runs``: the overrides of
    each experiment) at the paper's K and M of ``table``: their rows, and the planner's cells."""
    rows: list[SimRow] = []
    cells: list[Cell] = []
    for overrides in runs:
        m = model(overrides, hardware)
        paper = throughput(table, m.spec.model.name)
        Ks, Ms = sorted({K for K, _ in paper}), sorted({M for _, M in paper})
        if "partition" in which and m.spec.model.name == "amoebanet_d":
            rows += partitions(m, table, Ks, Ms)
        if "link" in which:
            rows += links(m, table, Ks, max(Ms))
        if "planner" in which:
            cells += planner_cells(m, table, Ks, max(Ms))
        if "efficiency" in which:
            cpu = model(overrides, "measured", m.plan)
            rows += efficiency(cpu, m, table)
            rows += extrapolation(cpu, table, Ks, Ms)
    return rows, cells


def _simulate_pick(m: Model, costs: CostModel, c: Candidate) -> SimResult:
    """The search's pick ``c`` (its K, M, schedule, cells per stage, partition, remat) simulated."""
    pipe = replace(
        m.spec.pipeline, K=c.K, M=c.M, schedule=c.schedule, virtual_stages=c.virtual_stages
    )
    spec = replace(m.spec, pipeline=pipe)
    return simulate_plan(spec, m.hw, costs, c.balance, c.micro_batch, c.checkpoint)
