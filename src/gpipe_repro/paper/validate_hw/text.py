"""The hardware validation's page and plot (``hw.md``, ``hw.png``), from its CSVs alone.

Sections: the targets per device (``rows.DeviceSummary``), every anchor, which experiments' cells rest
on a roofline not anchored well enough (``rows.rests_on``), and this CPU's roofline per layer kind
against the measured costs (``cpu.csv``; absent with ``--no-cpu``).
"""

from __future__ import annotations

from pathlib import Path

from ...sim.anchors import MIN_ANCHORS, TOLERANCE
from ..plot import figure
from ..provenance import Provenance
from .rows import AnchorRow, CpuRow, DeviceSummary, kinds, rests_on
from .uses import UseRow

TITLE = "Published hardware profiles against published training throughputs"


def _devices(summaries: list[DeviceSummary]) -> list[str]:
    lines = [
        "## Targets per device",
        "",
        f"Target (issue #21): every anchor within {TOLERANCE:.0%} of its published throughput, and "
        f"at least {MIN_ANCHORS} anchors per device. *Checks* are the anchors the curve was not "
        "fitted on; a fit anchor is right by construction up to what one factor cannot fix, and a "
        "check at a fit anchor's setting (the same model, batch per device, sequence and "
        "precision: only the published run's device count differs) is simulated the same, so it "
        "checks the published run's scaling, not the profile; *new* counts the others.",
        "",
        "| device | anchors | within | checks | checks within | new | worst error | fed | "
        f">= {MIN_ANCHORS} anchors | each within {TOLERANCE:.0%} | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        worst = f"{s.worst:+.1%}" if s.worst is not None else "-"
        lines.append(
            f"| {s.device} | {s.anchors} | {s.within} | {s.checks} | {s.checks_within} | "
            f"{s.checks_new} | {worst} | "
            f"{s.inputs or '-'} | {'met' if s.enough else 'not met'} | "
            f"{'met' if s.each else 'not met'} | {'**met**' if s.met else '**not met**'} |"
        )
    return [*lines, "", *(f"- {s.line()}" for s in summaries), ""]


def _anchors(rows: list[AnchorRow]) -> list[str]:
    lines = [
        "## Every anchor",
        "",
        "Each anchor's model is built on the meta device, counted, and one device's training step "
        "simulated on the profile's roofline at the published batch, sequence and precision; both "
        "throughputs are samples per second per device (the published one over its devices).",
        "",
        "| device | model | setting | published /s | simulated /s | error | role | "
        f"within {TOLERANCE:.0%} | source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        seq = f" x {r.seq} tokens" if r.seq else ""
        setting = f"batch {r.batch}{seq}, {r.precision}, {r.devices} device(s)"
        lines.append(
            f"| {r.device} | {r.model} | {setting} | {r.published:.3g} | {r.simulated:.3g} | "
            f"{r.error:+.1%} | {r.role} | {'yes' if r.within else '**no**'} | [link]({r.source}) |"
        )
    return [*lines, ""]


def _rests(summaries: list[DeviceSummary], used: list[UseRow], cpu: list[CpuRow]) -> list[str]:
    lines = [
        "## What rests on each profile",
        "",
        "The experiments whose cells are simulated on a published profile (`conf/experiment/`, "
        "`backend: sim` or `auto`: simulated wherever the host lacks a CUDA device per stage). A "
        "profile vouches for a cell end to end when its targets are met and one of its anchors is a "
        "model fed the same input (images or tokens), and per layer (the costs a time-balanced "
        "partition is cut on) when the same roofline gets this CPU's layers of models fed that "
        f"input within {TOLERANCE:.0%}; otherwise the cell's number is the roofline's alone.",
        "",
    ]
    verdicts = rests_on(summaries, used, kinds(cpu))
    lines += [f"- {'' if ok else '**'}{line}{'' if ok else '**'}" for ok, line in verdicts]
    if not verdicts:
        lines.append("- No experiment is simulated on a published profile.")
    return [*lines, ""]


def _cpu(rows: list[CpuRow], profile: str) -> list[str]:
    lines = ["## This CPU's roofline against its measured costs", ""]
    if not rows:
        return [*lines, "Not run (`--no-cpu`).", ""]
    sizes = sorted({r.micro_batch for r in rows})
    ks = kinds(rows)
    good = sum(k.within for k in ks)
    lines += [
        "The one device whose per-layer costs can be measured here: a roofline profile of this CPU "
        "calibrated from micro-benchmarks only (`cpu.yaml`: "
        f"{profile}), against every layer of three small models timed as the engine incurs them "
        "(forward + backward, one intra-op thread). Error: roofline / measured - 1, per kind of "
        "layer (summed over the model's layers of that kind) and micro-batch.",
        "",
        "| model | layer kind | layers | "
        + " | ".join(f"micro-batch {n}" for n in sizes)
        + f" | within {TOLERANCE:.0%} at each |",
        "|---|---|---|" + "---|" * len(sizes) + "---|",
    ]
    count = {(r.model, r.kind): r.layers for r in rows}
    for k in ks:
        err = dict(k.errors)
        cells = " | ".join(f"{err[n]:+.0%}" if n in err else "-" for n in sizes)
        lines.append(
            f"| {k.model} | {k.kind} | {count[(k.model, k.kind)]} | {cells} | "
            f"{'yes' if k.within else '**no**'} |"
        )
    verdict = (
        "the roofline is anchored on this CPU"
        if good == len(ks)
        else "**this CPU's roofline is not anchored well enough: a published profile's roofline "
        "costs layers the same way, so beyond its anchors' models its per-layer split is unchecked**"
    )
    lines += [
        "",
        f"{good} of {len(ks)} layer kinds within {TOLERANCE:.0%} at every micro-batch "
        f"(median error over all: {_median([e for k in ks for _, e in k.errors]):+.0%}): {verdict}.",
        "",
    ]
    return lines


def _median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs)


def markdown(
    rows: list[AnchorRow],
    summaries: list[DeviceSummary],
    used: list[UseRow],
    cpu: list[CpuRow],
    cpu_profile: str,
    prov: Provenance,
) -> str:
    lines = [
        *prov.page(TITLE),
        "",
        "Each published profile (`conf/hardware/*.yaml`) is checked against the published "
        "end-to-end training throughputs it cites (its *anchors*), simulated at their published "
        "settings; the roofline that costs them is also checked layer by layer on this CPU. "
        "Plot: `hw.png`.",
        "",
        *_devices(summaries),
        *_anchors(rows),
        *_rests(summaries, used, cpu),
        *_cpu(cpu, cpu_profile),
    ]
    return "\n".join(lines)


def plot(rows: list[AnchorRow], cpu: list[CpuRow], path: Path) -> None:
    panels = 2 if cpu else 1
    with figure(path, 1, panels, figsize=(6 * panels, 4.2), squeeze=False) as (fig, axes):
        ax = axes[0][0]
        ys = list(range(len(rows)))
        colors = ["tab:blue" if r.role == "fit" else "tab:orange" for r in rows]
        ax.barh(ys, [100 * r.error for r in rows], color=colors)
        ax.set_yticks(ys, [f"{r.device} {r.model} b{r.batch}" for r in rows], fontsize=7)
        ax.axvspan(-100 * TOLERANCE, 100 * TOLERANCE, color="green", alpha=0.1)
        ax.invert_yaxis()
        ax.set(xlabel="simulated / published - 1 (%)", title="anchors (blue: fit, orange: check)")
        ax.grid(alpha=0.3)
        if cpu:
            ax = axes[0][1]
            for k in kinds(cpu):
                ns, es = zip(*k.errors)
                ax.plot(ns, [100 * e for e in es], "o-", label=f"{k.model} {k.kind}"[:40])
            sizes = sorted({r.micro_batch for r in cpu})
            ax.set_xscale("log")
            ax.set_xticks(sizes, [str(n) for n in sizes])
            ax.minorticks_off()
            ax.axhspan(-100 * TOLERANCE, 100 * TOLERANCE, color="green", alpha=0.1)
            ax.set(
                xlabel="micro-batch",
                ylabel="roofline / measured - 1 (%)",
                title="this CPU's roofline per layer kind",
            )
            ax.legend(fontsize=6)
            ax.grid(alpha=0.3)
