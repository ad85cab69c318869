"""The planner's output: the ranked table, why the best wins, the pick's ``gpipe-run`` command, files."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from .candidate import Candidate, Stats

__all__ = ["table", "why", "command", "write"]

GiB = 2**30
HEADER = (
    "rank",
    "K",
    "replicas",
    "M",
    "schedule",
    "remat",
    "balance",
    "micro_batch",
    "batch",
    "step_ms",
    "samples_per_s",
    "bubble",
    "peak_gib_per_stage",
)


def _row(i: int, c: Candidate) -> list[str]:
    return [
        str(i + 1),
        str(c.K),
        str(c.replicas),
        str(c.M),
        c.schedule_name,
        c.remat,
        "-".join(map(str, c.balance)),
        str(c.micro_batch),
        str(c.batch_size),
        f"{c.step_s * 1e3:.2f}",
        f"{c.samples_per_s:.1f}",
        f"{c.bubble:.3f}",
        " ".join(f"{b / GiB:.2f}" for b in c.stage_bytes),
    ]


def table(ranked: Sequence[Candidate], cap: int) -> str:
    """A Markdown table, best first; the per-stage peaks are planned exactly, against ``cap``."""
    rows = [list(HEADER[:-1]) + [f"peak GiB per stage (cap {cap / GiB:.2f})"]]
    rows += [_row(i, c) for i, c in enumerate(ranked)]
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def why(ranked: Sequence[Candidate]) -> str:
    """One line: why the best beats the runner-up."""
    if len(ranked) < 2:
        return "the only configuration that fits"
    a, b = ranked[0], ranked[1]
    gain = a.samples_per_s / b.samples_per_s - 1
    diffs = [
        f"{name} {x} vs {y}"
        for name, x, y in (
            ("K", a.K, b.K),
            ("replicas", a.replicas, b.replicas),
            ("M", a.M, b.M),
            ("schedule", a.schedule_name, b.schedule_name),
            ("remat", a.remat, b.remat),
            ("balance", "-".join(map(str, a.balance)), "-".join(map(str, b.balance))),
        )
        if x != y
    ]
    parts = [f"bubble {a.bubble:.3f} vs {b.bubble:.3f}"]
    return (
        f"the best is {gain:.1%} faster than the runner-up ({'; '.join(diffs) or 'same shape'}; "
        f"{', '.join(parts)}; step {a.step_s * 1e3:.2f} vs {b.step_s * 1e3:.2f} ms)"
    )


def command(run_args: Sequence[str], c: Candidate) -> str:
    """The ``gpipe-run`` command that runs the pick (its options after the user's own)."""
    ck = c.checkpoint[0] if len(set(c.checkpoint)) == 1 else "[" + ",".join(c.checkpoint) + "]"
    mine = [
        f"pipeline.K={c.K}",
        f"pipeline.M={c.M}",
        f"pipeline.replicas={c.replicas}",
        f"pipeline.schedule={c.schedule}",
        f"pipeline.virtual_stages={c.virtual_stages}",
        f"pipeline.checkpoint={ck}",
        f"pipeline.balance=[{','.join(map(str, c.balance))}]",
        f"train.batch_size={c.batch_size}",
        "train.batch_mode=fixed",
    ]
    keys = {m.split("=")[0] for m in mine}
    kept = [a for a in run_args if a.split("=")[0].lstrip("+") not in keys]
    return "gpipe-run " + " ".join([*kept, *mine])


def write(
    out: Path, ranked: Sequence[Candidate], stats: Stats, cap: int, summary: str, cmd: str
) -> None:
    """``plan.csv`` (one row per ranked candidate) and ``plan.md`` (the table, the pick, the search)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "plan.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*HEADER, "cap_gib", "checkpoint"])
        for i, c in enumerate(ranked):
            w.writerow([*_row(i, c), f"{cap / GiB:.3f}", ",".join(c.checkpoint)])
    (out / "plan.md").write_text(
        f"# gpipe-plan\n\n{summary}\n\n{table(ranked, cap)}\n\n{why(ranked)}\n\n"
        f"```\n{cmd}\n```\n\n{search_line(stats)}\n"
    )


def search_line(s: Stats) -> str:
    return (
        f"search: {s.enumerated} candidates scored in {s.seconds:.2f} s ({s.rate:,.0f}/s): "
        f"{s.over_cap} over the cap, {s.pruned} pruned by the bound, {s.simulated} simulated"
    )
