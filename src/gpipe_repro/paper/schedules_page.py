"""The schedules page's numbers and figure, from ``results.csv``'s rows and the drawn timelines alone.

``summary``: the answer the page opens with, the normalised throughput and peak-memory grids per
(model, hardware), the measured cells beside their simulation, and the memory-cap verdicts; the
page (``templates/schedules.md.j2``) words them and makes their tables. ``plot``: one timeline per
schedule of the drawn (K, M).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

CAPS = (1.0, 0.5, 0.25)  # shares of one device's memory the cap verdicts are drawn at
COLORS = {"forward": "#4C72B0", "backward": "#DD8452", "recompute": "#55A868", "weight": "#C44E52"}


def _by(rows: Sequence[Any], **key: Any) -> list[Any]:
    return [r for r in rows if all(getattr(r, k) == v for k, v in key.items())]


def _ok(rows: Sequence[Any]) -> list[Any]:
    return [r for r in rows if r.status == "ok" and r.step_s]


def bubble_time(r: Any) -> float:
    return (r.bubble or 0.0) * r.step_s


def answer(rows: Sequence[Any], paper: str) -> list[dict[str, Any]]:
    """Per simulated model, at its largest K and M = 8 (else its largest M) on the first hardware it
    was simulated on: each newer schedule's (name, share of GPipe's bubble time it recovers, speed
    over the paper's choice, largest stage over GPipe's with remat never)."""
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
            if r is not None:
                gone = 1 - bubble_time(r) / bubble_time(base) if bubble_time(base) else None
                parts.append((v, gone, ref.step_s / r.step_s, r.peak_bytes / base.peak_bytes))
        if parts:
            out.append({"model": model, "K": K, "M": M, "hardware": hw, "parts": parts})
    return out


def grid(rows: Sequence[Any], model: str, hw: str) -> dict[str, Any]:
    """One (model, hardware)'s simulated cells: its (K, M) columns, schedules, cells by (schedule,
    K, M), one device's memory (None: unknown) and the cells that did not run."""
    mine = _by(rows, model=model, hardware=hw, source="simulated")
    return {
        "model": model,
        "hardware": hw,
        "memory": mine[0].memory_bytes if mine else None,
        "columns": sorted({(r.K, r.M) for r in mine}),
        "variants": list(dict.fromkeys(r.variant for r in mine)),
        "at": {(r.variant, r.K, r.M): r for r in mine},
        "skipped": [r for r in mine if r.status != "ok"],
    }


def caps(rows: Sequence[Any], paper: str) -> list[dict[str, Any]]:
    """Per (model, hardware, K, cap): the fastest fitting cell (None: nothing fits), the paper's
    choice (remat always, M >= 4K) at its fastest fitting M (None: it does not fit), and whether
    the paper's choice is itself the fastest."""
    sim = _ok(_by(rows, source="simulated"))
    out = []
    for model, hw, K in dict.fromkeys((r.model, r.hardware, r.K) for r in sim):
        mine = _by(sim, model=model, hardware=hw, K=K)
        dev = mine[0].memory_bytes
        if not dev:
            continue
        for share in CAPS:
            fit = [r for r in mine if r.peak_bytes is not None and r.peak_bytes <= dev * share]
            best = max(fit, key=lambda r: r.throughput, default=None)
            ours = [r for r in fit if r.variant == paper and r.M >= 4 * K]
            out.append({
                "model": model, "hardware": hw, "K": K, "cap": dev * share, "best": best,
                "paper": max(ours, key=lambda r: r.throughput, default=None),
                "wins": best is not None and best.variant == paper and best.M >= 4 * K,
            })  # fmt: skip
    return out


def summary(rows: Sequence[Any], paper: str = "gpipe, remat always") -> dict[str, Any]:
    """What the page says, from the rows alone."""
    sim = _by(rows, source="simulated")
    pairs = list(dict.fromkeys((r.model, r.hardware) for r in sim))
    return {
        "answer": answer(rows, paper),
        "paper": paper,
        "grids": [grid(rows, m, h) for m, h in pairs],
        "simulated": len(_ok(sim)),
        "not_runnable": len(sim) - len(_ok(sim)),
        "measured": _by(rows, source="measured"),
        "caps": caps(rows, paper),
        "cap_shares": CAPS,
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
