"""The schedules page's numbers and figure, from ``results.csv``'s rows and the drawn timelines alone.

``summary``: the answer the page opens with, the normalised throughput and peak-memory tables per
(model, hardware), the measured cells beside their simulation, and the memory-cap verdicts.
``plot``: one timeline per schedule of the drawn (K, M).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .markdown import DASH, gib, mib, num, pct

CAPS = (1.0, 0.5, 0.25)  # shares of one device's memory the cap verdicts are drawn at
COLORS = {"forward": "#4C72B0", "backward": "#DD8452", "recompute": "#55A868", "weight": "#C44E52"}


def _by(rows: Sequence[Any], **key: Any) -> list[Any]:
    return [r for r in rows if all(getattr(r, k) == v for k, v in key.items())]


def _ok(rows: Sequence[Any]) -> list[Any]:
    return [r for r in rows if r.status == "ok" and r.step_s]


def bubble_time(r: Any) -> float:
    return (r.bubble or 0.0) * r.step_s


def answer(rows: Sequence[Any], paper: str) -> list[str]:
    """One sentence per simulated model, at its largest K and M = 8 (else its largest M) on the
    first hardware it was simulated on."""
    sim = _ok(_by(rows, source="simulated"))
    out = []
    for model in dict.fromkeys(r.model for r in sim):
        mine = _by(sim, model=model)
        hw = mine[0].hardware
        K = max(r.K for r in mine)
        Ms = {r.M for r in mine if r.K == K}
        M = 8 if 8 in Ms else max(Ms)
        cell = {r.variant: r for r in _by(mine, hardware=hw, K=K, M=M)}
        base, ref = cell.get("gpipe, remat never"), cell.get(paper)
        if base is None or ref is None:
            continue
        parts = []
        for v in ("zb-h1", "interleaved v=2", "interleaved v=4"):
            r = cell.get(v)
            if r is None:
                continue
            gone = 1 - bubble_time(r) / bubble_time(base) if bubble_time(base) else None
            parts.append(
                f"{v} recovers {pct(gone, 0)} of GPipe's bubble time, runs "
                f"{num(ref.step_s / r.step_s)}× the paper's choice ({paper}) and holds "
                f"{num(r.peak_bytes / base.peak_bytes)}× GPipe's (remat never) largest stage"
            )
        if parts:
            out.append(f"**{model}, K = {K}, M = {M} on {hw}**: " + "; ".join(parts) + ".")
    return out


def grid(rows: Sequence[Any], model: str, hw: str) -> dict[str, Any]:
    """The normalised throughput and largest-stage memory tables of one (model, hardware)."""
    mine = _by(rows, model=model, hardware=hw, source="simulated")
    keys = sorted({(r.K, r.M) for r in mine})
    variants = list(dict.fromkeys(r.variant for r in mine))
    head = ["schedule", *(f"K={K} M={M}" for K, M in keys)]
    at = {(r.variant, r.K, r.M): r for r in mine}

    def cells(value: Any) -> list[list[str]]:
        out = []
        for v in variants:
            line = [v]
            for K, M in keys:
                r = at.get((v, K, M))
                line.append(value(r) if r is not None and r.status == "ok" else "n/a")
            out.append(line)
        return out

    return {
        "model": model,
        "hardware": hw,
        "memory": gib(mine[0].memory_bytes) if mine and mine[0].memory_bytes else DASH,
        "head": head,
        "speed": cells(lambda r: num(r.normalized)),
        "peak": cells(lambda r: f"{r.peak_bytes / 2**30:.2f}" if r.peak_bytes else DASH),
        "skipped": skipped(mine),
    }


def _why(status: str) -> str:
    """A cell's reason in a few words: the schedule's rules, or what did not fit."""
    if "cannot run schedule" in status:
        return "M not a multiple of K (interleaved)"
    if "leaves a cell empty" in status:
        return "more cells (K·v) than layers"
    if "alone needs" in status:
        return "a single layer does not fit one device at this micro-batch (GPipe §6)"
    return status


def skipped(rows: Sequence[Any]) -> list[str]:
    """The cells that did not run, by reason: 'reason: schedule (K, M), ...'."""
    by: dict[str, list[str]] = {}
    for r in rows:
        if r.status != "ok":
            by.setdefault(_why(r.status), []).append(f"{r.variant} ({r.K}, {r.M})")
    return [f"{why}: {', '.join(cells)}" for why, cells in by.items()]


def caps(rows: Sequence[Any], paper: str) -> tuple[list[list[str]], list[str]]:
    """Per (model, hardware, K, cap): the fastest fitting cell against the paper's best fitting
    one; and where the paper's choice (remat always, M >= 4K) is itself the fastest."""
    sim = _ok(_by(rows, source="simulated"))
    table, best_paper = [], []
    for model, hw, K in dict.fromkeys((r.model, r.hardware, r.K) for r in sim):
        mine = _by(sim, model=model, hardware=hw, K=K)
        dev = mine[0].memory_bytes
        if not dev:
            continue
        for share in CAPS:
            cap = dev * share
            fit = [r for r in mine if r.peak_bytes is not None and r.peak_bytes <= cap]
            if not fit:
                table.append([model, hw, K, gib(cap), "nothing fits", DASH, DASH, DASH])
                continue
            best = max(fit, key=lambda r: r.throughput)
            ours = [r for r in fit if r.variant == paper and r.M >= 4 * K]
            p = max(ours, key=lambda r: r.throughput) if ours else None
            wins = best.variant == paper and best.M >= 4 * K
            if wins:
                best_paper.append(f"{model} on {hw}, K = {K}, cap {gib(cap)}")
            table.append(
                [
                    model, hw, K, gib(cap), f"{best.variant}, M = {best.M}", num(best.normalized),
                    f"M = {p.M}: {num(p.normalized)}" if p else "does not fit",
                    "**yes**" if wins else "no",
                ]
            )  # fmt: skip
    return table, best_paper


def measured_cells(rows: Sequence[Any]) -> list[list[str]]:
    out = []
    for r in _by(rows, source="measured"):
        if r.status != "ok":
            out.append([r.variant, r.M, r.status, "", "", "", "", ""])
            continue
        err = r.predicted_step_s / r.step_s - 1 if r.predicted_step_s else None
        out.append(
            [
                r.variant, r.M, f"{r.step_s:.3f}", num(r.predicted_step_s, ".3f"),
                pct(err, 0, True), pct(r.bubble, 0), pct(r.ideal_bubble, 0), mib(r.peak_bytes, 1),
            ]
        )  # fmt: skip
    return out


def summary(rows: Sequence[Any], paper: str = "gpipe, remat always") -> dict[str, Any]:
    """What the page says, from the rows alone."""
    sim = _by(rows, source="simulated")
    pairs = list(dict.fromkeys((r.model, r.hardware) for r in sim))
    cap_cells, best_paper = caps(rows, paper)
    return {
        "answer": answer(rows, paper),
        "paper": paper,
        "grids": [grid(rows, m, h) for m, h in pairs],
        "simulated": len(_ok(sim)),
        "not_runnable": len(sim) - len(_ok(sim)),
        "measured": measured_cells(rows),
        "caps": cap_cells,
        "best_paper": best_paper,
        "cap_shares": [pct(c, 0) for c in CAPS],
    }


def plot(rows: Sequence[Any], lines: dict[str, list[dict]], path: Path) -> None:
    """One timeline per schedule: the first (model, hardware) drawn, stage rows, boxes by action."""
    from .plot import figure

    first = next(iter(lines)).rsplit("|", 1)[0] if lines else None
    drawn = {k.rsplit("|", 1)[1]: v for k, v in lines.items() if first and k.startswith(first)}
    n = max(1, len(drawn))
    with figure(path, n, 1, figsize=(11, 1.3 * n + 1), squeeze=False) as (fig, axes):
        for ax, (variant, events) in zip([a[0] for a in axes], drawn.items()):
            K = 1 + max(e["stage"] for e in events)
            t0 = min(e["start"] for e in events)
            for e in events:
                if e["action"] in COLORS and e.get("replica", 0) == 0:
                    ax.broken_barh(
                        [((e["start"] - t0) * 1e3, (e["end"] - e["start"]) * 1e3)],
                        (K - 1 - e["stage"] - 0.4, 0.8),
                        color=COLORS[e["action"]],
                    )
            ax.set_yticks(range(K), [f"stage {K - 1 - k}" for k in range(K)], fontsize=7)
            ax.set_title(f"{variant} ({first})", fontsize=8, loc="left")
        axes[-1][0].set_xlabel("ms (simulated step; blue F, orange B, green recompute, red W)")
        if not drawn:
            axes[0][0].set_title("no timeline drawn")
