"""The planner's validation as a page (``plan.md``) and a figure (``plan.png``), from the rows alone.

Every number comes from ``validation.csv`` (``summary.summarize``) and ``calibration.json`` (the
settings, the phases' seconds, the predicted wall time of the full target); the targets' lines say
met or not met from the numbers.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...measure.planner import PlanRow
from ...measure.predict import RULES
from ..plot import figure
from ..provenance import Provenance
from .summary import Summary, peaks, summarize, targets

__all__ = ["markdown", "plot"]

TITLE = "The planner against every configuration measured (gpipe-plan, issue #19)"


def _cfg(r: PlanRow) -> str:
    modes = set(r.checkpoint.split("/"))
    remat = r.checkpoint if len(modes) > 1 else modes.pop()
    return f"K={r.K} M={r.M} {r.schedule} {remat} [{r.balance}]"


def _sps(step: float | None) -> float:
    from ...measure.models import N

    return N / step if step else 0.0


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1%}"


def _rho(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _scenario_table(sums: Sequence[Summary]) -> list[str]:
    head = "| scenario | cap MiB | measured | pick | pick samples/s | best measured | best samples/s | regret | repeatability | rank of best | Spearman | real / emulated | core wait |"
    out = [head, "|" + "---|" * 13]
    for s in sums:
        out.append(
            f"| {s.scenario} | {s.cap_mib:.2f} | {s.candidates} | {_cfg(s.pick)} | "
            f"{_sps(s.pick.measured_step_s):.0f} | {_cfg(s.best)} | {_sps(s.best.measured_step_s):.0f} | "
            f"{s.regret:.1%} | {'—' if s.repeat is None else f'{s.repeat:.1%}'} | {s.best_rank} | "
            f"{_rho(s.spearman)} | {_rho(s.spearman_by_kind['real'])} / "
            f"{_rho(s.spearman_by_kind['emulated'])} | "
            f"{'—' if s.wait is None else f'{s.wait:.0%}'} |"
        )
    return out


def _rules_table(sums: Sequence[Summary]) -> list[str]:
    out = ["| scenario | " + " | ".join(RULES.values()) + " |", "|---|" + "---|" * len(RULES)]
    for s in sums:
        cells = ["does not fit" if s.gains[r] is None else _pct(s.gains[r]) for r in RULES]
        out.append(f"| {s.scenario} | " + " | ".join(cells) + " |")
    return out


def _memory_table(sums: Sequence[Summary]) -> list[str]:
    out = [
        "| scenario | cap MiB | pick | predicted per stage (MiB) | measured per stage (MiB) | largest measured / cap |",
        "|---|---|---|---|---|---|",
    ]
    for s in sums:
        m = s.pick.measured_peak_mib or "—"
        share = "—" if s.pick_peak_mib is None else f"{s.pick_peak_mib / s.cap_mib:.0%}"
        out.append(
            f"| {s.scenario} | {s.cap_mib:.2f} | {_cfg(s.pick)} | {s.pick.predicted_peak_mib} | {m} | {share} |"
        )
    return out


def _memory_error(rows: Sequence[PlanRow]) -> str:
    errs = [
        (p - m) / m
        for r in rows
        if r.measured_peak_mib
        for p, m in zip(peaks(r.predicted_peak_mib), peaks(r.measured_peak_mib))
        if m > 0
    ]
    if not errs:
        return "No per-stage peak was measured."
    q = statistics.quantiles(errs, n=10) if len(errs) >= 2 else [errs[0]] * 9
    under = sum(e < 0 for e in errs) / len(errs)
    return (
        f"Over all {len(errs)} measured stages: (predicted - measured) / measured has median "
        f"{statistics.median(errs):+.1%}, 10th-90th percentile {q[0]:+.1%} .. {q[-1]:+.1%}; "
        f"{under:.0%} of stages predicted below their measurement."
    )


def _emulation(calib: dict[str, Any]) -> str:
    """How the emulated configurations ran, in words (an older calibration: dilation 1)."""
    dil = calib.get("dilations")
    if not dil:
        return "each layer sleeps its profiled cost"
    st = calib.get("settings", {})
    each = ", ".join(f"{k} ×{v:g}" for k, v in dil.items())
    return (
        f"each layer sleeps its profiled cost times a dilation, {st.get('dilation_scale', '?')} times "
        f"the ranks per core ({each}), so that the engine's own CPU work of K ranks does not queue "
        "for the cores as it would not on K devices; the measured step is put back on the device's "
        "time scale by the simulation's ratio of the two scales — the emulation's relative error at "
        f"the dilated scale carried over; {st.get('emulated_warmup', '?')} warm-up and "
        f"{st.get('emulated_steps', '?')} timed steps per round"
    )


def markdown(rows: Sequence[PlanRow], prov: Provenance, out: Path) -> list[Path]:
    calib: dict[str, Any] = {}
    if (out / "calibration.json").exists():
        calib = json.loads((out / "calibration.json").read_text())
    sums = summarize(rows)
    st = calib.get("settings", {})
    lines = [*prov.page(TITLE), ""]
    lines += [
        "The planner (`search.space`, as `gpipe-plan` runs it) is given each model under each memory "
        "cap; then every configuration of its list, and the one each rule of thumb gives, is "
        "measured on this machine: K = 1, 2 with the real engine, K = 4, 8 with the engine in "
        f"emulation mode ({_emulation(calib)}). The search is restricted to the "
        f"measurable space: K in {st.get('Ks', '?')}, one replica, M dividing the mini-batch up to "
        f"{st.get('max_m', '?')}, both schedules, remat per stage and the partition as the planner "
        f"chooses them. {st.get('rounds', '?')} rounds of fresh processes in a new order each.",
        "",
        "## Targets",
        "",
        "| target | value | goal | |",
        "|---|---|---|---|",
    ]
    for t in targets(sums):
        lines.append(f"| {t.what} | {t.value} | {t.goal} | {'met' if t.met else '**not met**'} |")
    if not sums:
        lines.append("| (no scenario measured) | | | |")
    lines += ["", "## Regret per scenario", "", *_scenario_table(sums), ""]
    lines += [
        "Regret: 1 - the pick's measured samples/s over the best measured configuration's. "
        "Repeatability: the same configuration in two rounds, |a - b| / mean, median over the "
        "scenario's configurations — a regret below it is within the machine's noise. Rank of best: "
        "the best measured configuration's place in the planner's list. Spearman real / emulated: "
        "within the configurations run for real (K <= 2) and within the emulated ones alone. Core "
        "wait: the median share of a step a rank was runnable but waited for a core (other load "
        "on the machine; `validate_sim.cells.run_delay_s`).",
        "",
        "## The pick against the rules of thumb",
        "",
        "Measured gain of the pick's samples/s over each rule applied to it (the pick with that one "
        "choice made the usual way; remat always where that no longer fits the cap):",
        "",
        *_rules_table(sums),
        "",
        "## Memory: predicted against measured per-stage peaks (the picks)",
        "",
        *_memory_table(sums),
        "",
        _memory_error(rows),
        "",
        "Measured: the CPU allocator's peak during one training step plus the state (weights, "
        "gradients, RMSProp), each stage a real rank (emulated configurations: one more untimed "
        "launch with real ranks).",
        "",
    ]
    if calib:
        lines += [
            "## Wall time",
            "",
            f"This run: {calib['seconds']:.0f} s (profiling {calib['phases_s']['profile']:.0f} s, "
            f"planning {calib['phases_s']['plan']:.0f} s, measuring {calib['phases_s']['measure']:.0f} s; "
            f"{calib['counts']['configs']} configurations, {calib['counts']['config_rounds']} "
            f"configuration-rounds); load average before {calib['load_before']}, after "
            f"{calib['load_after']}.",
            f"The full target (`make validate-plan`) predicted from this run: "
            f"{calib['predicted_full_s'] / 60:.0f} min (an estimate: this run's seconds per phase "
            "scaled by the grids' sizes).",
            "",
        ]
    (out / "plan.md").write_text("\n".join(lines))
    plot(sums, rows, out / "plan.png")
    return [out / "plan.md", out / "plan.png"]


def plot(sums: Sequence[Summary], rows: Sequence[PlanRow], path: Path) -> None:
    with figure(path, 1, 2, figsize=(12, 4.5)) as (_, (a, b)):
        names = [s.scenario for s in sums]
        x = range(len(sums))
        a.bar([i - 0.2 for i in x], [100 * s.regret for s in sums], 0.4, label="regret")
        a.bar(
            [i + 0.2 for i in x],
            [100 * (s.repeat or 0) for s in sums],
            0.4,
            label="repeatability (same config twice)",
        )
        a.axhline(2, ls="--", c="gray", lw=0.8)
        a.set_xticks(list(x), names, rotation=60, ha="right", fontsize=7)
        a.set_ylabel("%")
        a.set_title("regret of the pick vs the machine's repeatability")
        a.legend(fontsize=7)
        for s in sums:
            rs = [
                r for r in rows if r.scenario == s.scenario and r.planner_rank and r.measured_step_s
            ]
            b.scatter(
                [_sps(r.predicted_step_s) for r in rs],
                [_sps(r.measured_step_s) for r in rs],
                s=8,
                label=s.scenario,
            )
        b.set_xlabel("predicted samples/s")
        b.set_ylabel("measured samples/s")
        b.set_xscale("log")
        b.set_yscale("log")
        b.set_title("every listed configuration")
        b.legend(fontsize=6, ncol=2)
