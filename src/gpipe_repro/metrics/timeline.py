"""Draw the schedule as it ran: one row per stage, one box per action (the measured Fig. 2c)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..engine.events import Event

__all__ = ["plot_timeline"]

COLORS = {
    "forward": "#4C72B0",
    "backward": "#DD8452",
    "recompute": "#55A868",
    "weight": "#C44E52",  # a split backward's W (zb-h1)
    "wait": "#DDDDDD",
    "send": "#8172B3",
}


def plot_timeline(events: Sequence[Event], K: int, path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evs = [e for e in events if e.replica == 0 and e.action in COLORS]
    fig, ax = plt.subplots(figsize=(11, 0.6 * K + 1.4))
    if evs:
        t0 = min(e.start for e in evs)
        # One broken_barh per (stage, action): thousands of single-box calls (K = 8, M = 32) each
        # re-autoscale the axes and take tens of seconds.
        groups: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for e in evs:
            groups.setdefault((e.stage, e.action), []).append(
                ((e.start - t0) * 1e3, (e.end - e.start) * 1e3)
            )
        for (stage, action), bars in groups.items():
            y = K - 1 - stage
            h = 0.8 if action in ("forward", "backward", "recompute", "weight") else 0.3
            ax.broken_barh(bars, (y - h / 2, h), facecolors=COLORS[action])
        labelled = [
            e for e in evs if e.action in ("forward", "backward", "weight") and e.end > e.start
        ]
        if len(labelled) <= 400:  # beyond that the numbers are unreadable anyway
            for e in labelled:
                ax.text(
                    (e.start - t0 + (e.end - e.start) / 2) * 1e3,
                    K - 1 - e.stage,
                    str(e.mb) + (f".{e.chunk}" if e.chunk else ""),  # micro-batch.cell
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white",
                )
    ax.set_yticks(range(K), [f"stage {K - 1 - i}" for i in range(K)])
    ax.set_xlabel("time (ms)")
    ax.set_title(title or "pipeline timeline")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[Patch(color=c, label=a) for a, c in COLORS.items()],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=7,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
