"""Plots and traces of the simulator's validation (the page: ``templates/sim.md.j2``).

One cell's measured and simulated steps as Chrome traces (``engine.events.chrome_trace``, the format
of every run's ``trace.json``) and drawn one above the other; every cell's simulated against
measured step; the roofline against the measured layer costs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...engine.events import Event, chrome_trace
from ...measure.roofline_check import RooflineRow
from ...measure.simulator import KEY, CellRow
from ...metrics.timeline import COLORS
from ..plot import figure

MARKS = {"amoebanet": "o", "transformer": "s", "imbalanced": "^"}  # a validation model's marker


def _events(path: Path, cell: dict[str, Any]) -> tuple[list[Event], list[Event]] | None:
    if not path.exists():
        return None
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if all(d[k] == cell[k] for k in KEY):
                return [Event(**e) for e in d["measured"]], [Event(**e) for e in d["simulated"]]
    return None


def _timelines(
    measured: list[Event], simulated: list[Event], K: int, path: Path, title: str
) -> None:
    with figure(path, 2, 1, figsize=(11, 1.2 * K + 2.4), sharex=True) as (fig, axes):
        for ax, evs, label in ((axes[0], measured, "measured"), (axes[1], simulated, "simulated")):
            shown = [e for e in evs if e.action in COLORS]
            if shown:
                t0 = min(
                    e.start for e in evs if e.action in ("forward", "backward", "recompute", "wait")
                )
                groups: dict[tuple[int, str], list[tuple[float, float]]] = {}
                for e in shown:
                    groups.setdefault((e.stage, e.action), []).append(
                        ((e.start - t0) * 1e3, (e.end - e.start) * 1e3)
                    )
                for (k, a), bars in groups.items():
                    h = 0.8 if a in ("forward", "backward", "recompute") else 0.3
                    ax.broken_barh(bars, (K - 1 - k - h / 2, h), facecolors=COLORS[a])
            ax.set_yticks(range(K), [f"stage {K - 1 - i}" for i in range(K)])
            ax.set_title(label, fontsize=9, loc="left")
        axes[1].set_xlabel("time from the step's first action (ms)")
        from matplotlib.patches import Patch

        axes[0].legend(
            handles=[Patch(color=c, label=a) for a, c in COLORS.items()],
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            fontsize=7,
        )
        fig.suptitle(title, fontsize=10)


def trace_cell(out: Path, cell: dict[str, Any], tag: str) -> str | None:
    """Write ``cell``'s traces and their drawing as ``trace_<tag>*``; its name (None: no events)."""
    got = _events(out / "events.jsonl", cell)
    if got is None or not got[0]:
        return None
    measured, simulated = got
    name = "{model} K={K} M={M} {schedule} remat={checkpoint} ({kind})".format(**cell)
    for which, evs in (("measured", measured), ("simulated", simulated)):
        (out / f"trace_{tag}_{which}.json").write_text(json.dumps(chrome_trace(evs)))
    _timelines(measured, simulated, cell["K"], out / f"trace_{tag}.png", name)
    return name


def plot_cells(rows: Sequence[CellRow], path: Path) -> None:
    """Every cell's simulated against measured step, and its error by M."""
    with figure(path, 1, 2, figsize=(11, 4.2)) as (fig, axes):
        for kind, color in (("real", "#4C72B0"), ("emulated", "#DD8452")):
            for model, mark in MARKS.items():
                rs = [r for r in rows if r.kind == kind and r.model == model]
                if not rs:
                    continue
                style: dict[str, Any] = {"marker": mark, "color": color, "s": 14}
                measured = [1e3 * r.measured_step_s for r in rs]
                simulated = [1e3 * r.simulated_step_s for r in rs]
                axes[0].scatter(measured, simulated, label=f"{kind} {model}", **style)
                shifted = [r.M * (1.08 if kind == "emulated" else 1.0) for r in rs]
                axes[1].scatter(shifted, [100 * r.rel_error for r in rs], **style)
        lo = min(1e3 * min(r.measured_step_s, r.simulated_step_s) for r in rows)
        hi = max(1e3 * max(r.measured_step_s, r.simulated_step_s) for r in rows)
        xs = [lo, hi]
        axes[0].plot(xs, xs, "k-", lw=0.8)
        axes[0].fill_between(
            xs, [0.9 * x for x in xs], [1.1 * x for x in xs], color="k", alpha=0.08, label="±10%"
        )
        axes[0].set(
            xscale="log",
            yscale="log",
            xlabel="measured step (ms)",
            ylabel="simulated step (ms)",
            title="each cell: simulated vs measured",
        )
        axes[0].legend(fontsize=7)
        for y in (-10, -5, 5, 10):
            axes[1].axhline(y, color="k", lw=0.6, ls=":" if abs(y) == 5 else "--")
        axes[1].set(
            xscale="log",
            xlabel="micro-batches M",
            ylabel="error (%)",
            title="simulated − measured, by M",
        )
        for ax in axes:
            ax.grid(alpha=0.3)


def plot_roofline(rows: Sequence[RooflineRow], path: Path) -> None:
    """Each layer's roofline cost against its measured one, per pass and micro-batch."""
    with figure(path, figsize=(5.5, 4.2)) as (fig, ax):
        for model, mark in MARKS.items():
            rs = [r for r in rows if r.model == model]
            if rs:
                xs, ys = [1e3 * r.measured_s for r in rs], [1e3 * r.roofline_s for r in rs]
                ax.scatter(xs, ys, marker=mark, s=10, label=model)
        vals = [1e3 * v for r in rows for v in (r.measured_s, r.roofline_s) if v > 0]
        ax.plot([min(vals), max(vals)], [min(vals), max(vals)], "k-", lw=0.8)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="measured (ms)",
            ylabel="roofline (ms)",
            title="per layer, pass and micro-batch",
        )
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
