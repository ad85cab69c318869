"""The claims of Tables 2 and 3 (GPipe §3), judged from ``reports/table2/`` and ``reports/table3/``.

Rows: ``results.csv`` (``ThroughputRow``, normalised the paper's way: ``throughput_norm``) and the
simulator's studies (``sensitivity.csv``, ``SimRow``). A claim is judged on the paper's design — the
batch adjusted to fit memory — in this order of sources: measured on K GPUs where a host had them,
else simulated on the paper's device's published profile (TPU v3 for Table 2, P100 over PCIe for
Table 3), else simulated on this machine's measured per-layer costs; the first series that has the
cells the claim needs decides (the others are named in *ours*). A miss's cause is read from the
studies' rows (partition, per-sample efficiency) and the cell's decomposition, never guessed. The
findings are worded by ``templates/claims_throughput.md.j2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ...studies.published import throughput
from ...studies.sensitivity import SimRow
from ...studies.throughput_rows import ThroughputRow
from ...typed_csv import read_csv
from ..throughput_norm import paper_design, renormalise, series
from ..verdict import LINK_OK, NOT, TOLERANCE, Finding, at_most, ratio, reproduced, within
from . import Missing, results, worded

Key = tuple[str, str, str, str]  # model, source, hardware, batch mode
PROFILE = {2: "tpu_v3", 3: "p100_pcie"}
NAMES = {"tpu_v3": "a TPU v3 profile", "p100_pcie": "a P100 (PCIe) profile",
         "measured": "this CPU's measured costs"}  # fmt: skip
LINK = "the profile's (16 GB/s, 2 hops)"  # the link study's variant of the paper's set-up
found = partial(worded, "claims_throughput", tol=TOLERANCE, link_ok=LINK_OK, names=NAMES)


def rows(folder: Path) -> list[ThroughputRow]:
    return renormalise(results(folder, ThroughputRow))


def studies(folder: Path, study: str) -> list[SimRow]:
    path = folder / "sensitivity.csv"
    return [r for r in read_csv(path, SimRow) if r.study == study] if path.exists() else []


def design(rs: Sequence[ThroughputRow], table: int, model: str) -> list[Key]:
    """The model's series of the paper's design (batch adjusted to fit memory; a measured series
    whatever its batch), in the order the claims are judged on."""
    keys = dict.fromkeys(series(r) for r in rs if r.model == model and paper_design(r))

    def rank(k: Key) -> int:
        return 0 if k[1] == "measured" else 1 if k[2] == PROFILE[table] else 2

    return sorted(keys, key=rank)


def cell(rs: Sequence[ThroughputRow], key: Key, K: int, M: int) -> ThroughputRow | None:
    return next(
        (r for r in rs if series(r) == key and (r.K, r.M) == (K, M) and r.normalized is not None),
        None,
    )


def gain(
    rs: Sequence[ThroughputRow], key: Key, a: tuple[int, int], b: tuple[int, int]
) -> float | None:
    """Throughput at cell ``b`` over cell ``a`` within one series (whatever its normaliser)."""
    x, y = cell(rs, key, *a), cell(rs, key, *b)
    return None if x is None or y is None else float(y.normalized or 0) / float(x.normalized or 1)


def paper_gain(table: int, model: str, a: tuple[int, int], b: tuple[int, int]) -> float:
    p = throughput(table, model)
    return p[b] / p[a]


def first_gain(
    rs: Sequence[ThroughputRow],
    table: int,
    model: str,
    pairs: Sequence[tuple[tuple[int, int], tuple[int, int]]],
) -> tuple[Key, tuple[int, int], tuple[int, int], float, float]:
    """The first pair of cells (then the first design series) with a gain, and the paper's gain
    between them; ``Missing`` if none."""
    for a, b in pairs:
        for key in design(rs, table, model):
            g = gain(rs, key, a, b)
            if g is not None:
                return key, a, b, g, paper_gain(table, model, a, b)
    raise Missing(f"no {model} series of the paper's design has the cells {pairs}")


def _scaling(rs: Sequence[ThroughputRow], model: str, key: Key, a: tuple[int, int],
             b: tuple[int, int], g: float, off: str = "") -> dict[str, Any]:  # fmt: skip
    """Table 2's gain ``g`` and every other design series' between the same cells (the template's
    ``scaling``); ``off``: the paper's device (its hardware), where K = 2 does not run on it."""
    more = [(gain(rs, k, a, b), k) for k in design(rs, 2, model) if k != key]
    return {"g": g, "a": a, "b": b, "key": key, "off": off, "more": more}


# -- Table 2 -----------------------------------------------------------------------------------


def m1_flat(folder: Path) -> Finding:
    """At M = 1 the throughput barely grows with K: ours at most the paper's gain (rule *at most*),
    both models."""
    rs, parts, ok = rows(folder), [], True
    for model in ("amoebanet_d", "transformer_lm"):
        key, a, b, g, p = first_gain(rs, 2, model, [((2, 1), (8, 1)), ((4, 1), (8, 1))])
        ok &= at_most(g, p)
        parts.append((model, a, b, g, p, key))
    return found("m1_flat", reproduced(key[1]) if ok else NOT, parts=parts, ok=ok)


def transformer_linear(folder: Path) -> Finding:
    """Transformer-48: 3.5× for 4× the accelerators at M = 32 (rule *ratio* on the gain)."""
    rs = rows(folder)
    pairs = [((2, 32), (8, 32)), ((4, 32), (8, 32))]
    key, a, b, g, p = first_gain(rs, 2, "transformer_lm", pairs)
    paper_device = next((k for k in design(rs, 2, "transformer_lm") if k[2] == PROFILE[2]), None)
    off = paper_device and key != paper_device and cell(rs, paper_device, *a) is None
    scaling = _scaling(rs, "transformer_lm", key, a, b, g, PROFILE[2] if off else "")
    return found("transformer_linear", ratio(g, p, key[1]), scaling=scaling, g=g, p=p, b=b,
                 ok=within(g, p), at=cell(rs, key, *b))  # fmt: skip


def _partition_cause(folder: Path) -> dict[str, Any] | None:
    """Which partition of the study comes nearest the paper's AmoebaNet number at K = 8, M = 32,
    and ours by time (the template's ``partition_cause``); None: no partition study."""
    paper = throughput(2, "amoebanet_d")[(8, 32)]
    at = [
        r
        for r in studies(folder, "partition")
        if r.model == "amoebanet_d" and (r.K, r.M) == (8, 32) and r.normalized is not None
    ]
    if not at:
        return None
    near = min(at, key=lambda r: abs((r.normalized or 0.0) - paper))
    ours = next((r for r in at if r.variant.startswith("by time")), at[0])
    return {"near": near, "ours": ours, "paper": paper}


def amoebanet_sublinear(folder: Path) -> Finding:
    """AmoebaNet-D(18, 256): sub-linear, 1.21 → 3.48 from K = 2 to 8 at M = 32 (rule *ratio*)."""
    rs = rows(folder)
    key, a, b, g, p = first_gain(rs, 2, "amoebanet_d", [((2, 32), (8, 32))])
    v = ratio(g, p, key[1])
    return found("amoebanet_sublinear", v, scaling=_scaling(rs, "amoebanet_d", key, a, b, g),
                 ok=v != NOT, g=g, p=p, cause=_partition_cause(folder))  # fmt: skip


def contrast(folder: Path) -> Finding:
    """The Transformer scales better than AmoebaNet: AmoebaNet's gain from K = 2 to 8 at M = 32
    over the Transformer's at most 1 - tolerance (a contrast smaller than the tolerance is none
    we can claim), on the first source that ran both models at K = 2."""
    rs, pair = rows(folder), ((2, 32), (8, 32))
    p = paper_gain(2, "amoebanet_d", *pair) / paper_gain(2, "transformer_lm", *pair)
    for key in design(rs, 2, "amoebanet_d"):
        tkey = ("transformer_lm", *key[1:])
        ga, gt = gain(rs, key, *pair), gain(rs, tkey, *pair)
        if ga is None or gt is None:
            continue
        ok = ga / gt <= 1 - TOLERANCE
        return found("contrast", reproduced(key[1]) if ok else NOT, ga=ga, gt=gt, p=p, ok=ok,
                     key=key, at=cell(rs, key, 8, 32), cause=_partition_cause(folder))  # fmt: skip
    raise Missing("no source ran both models at K = 2 and 8, M = 32")


def cells_within(folder: Path, table: int) -> Finding:
    """The table's printed numbers: every cell within the tolerance (rule *ratio*), per model on
    its first design series."""
    rs, parts, good, total, source = rows(folder), [], 0, 0, "simulated"
    for model in ("amoebanet_d", "transformer_lm"):
        keys = design(rs, table, model)
        if not keys:
            continue
        key = keys[0]
        got = [
            r for r in rs if series(r) == key and r.normalized is not None and r.paper_normalized
        ]
        n = sum(within(r.normalized or 0, r.paper_normalized or 1) for r in got)
        good, total, source = good + n, total + len(got), key[1]
        worst = max(got, key=lambda r: abs((r.ratio or 1) - 1), default=None)
        parts.append((model, n, len(got), key, worst))
    if not total:
        raise Missing("no normalised cell of the paper's design")
    verdict = reproduced(source) if good == total else NOT
    return found("cells_within", verdict, good=good, total=total, parts=parts)


# -- Table 3 -----------------------------------------------------------------------------------


def link(folder: Path) -> Finding:
    """Communication is not the bottleneck: on the paper's link (device -> host -> device over
    PCIe) every K keeps at least 95% of a free link's throughput, both models."""
    rs = studies(folder, "link")
    if not rs:
        raise Missing("no link study in sensitivity.csv")
    on = [r for r in rs if r.variant == LINK]
    shared = [r for r in rs if r.variant.startswith("one shared PCIe")]
    ok = all((r.vs_free or 0) >= LINK_OK for r in on)
    return found("link", reproduced("simulated") if ok else NOT, ok=ok,
                 worst=min(on, key=lambda r: r.vs_free or 1.0),
                 low=min(shared, key=lambda r: r.vs_free or 1.0) if shared else None)  # fmt: skip
