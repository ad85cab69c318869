"""Fig. 3 (GPipe §5): many->English BLEU per language against model capacity, high- vs low-resource.

Experiment: ``gpipe-run -m experiment=fig3`` (one job per model size and seed; each job one model
trained on all languages at once, scored per language in ``eval.by_language``). The comparisons are
declared here: a depth ladder T(1|2|4, 512, 4), a width ladder T(2, 256|512|1024, 2|4|8), the
parameter-matched deep/wide pair T(4, 512, 4) / T(2, 1024, 8), and T(4, 512, 4) with and without the
trainability tricks; a model the sweep did not run is reported as missing. Collect: every job's
``metrics.json``. Rows: one per job and language. Summary: BLEU per model and language, mean ± sd over
seeds, grouped high/low resource; the paper's four claims, each judged by ``paper.stats`` (the paper
prints no number for them: the effect in question is the observed scale). Render: ``fig3.md``,
``fig3.png`` (languages from most to least data, as in the paper's Fig. 3).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..metrics.contract import RunMetrics
from .artefact import Artefact, Report
from .plot import figure
from .provenance import Provenance
from .runs import read_sweep
from .stats import RELATIVE_EFFECT, RULE, Sample, compare, sample, trend

Model = tuple[int, int, int, bool]  # L, H, A, tricks
DEPTH: list[Model] = [(1, 512, 4, True), (2, 512, 4, True), (4, 512, 4, True)]
WIDTH: list[Model] = [(2, 256, 2, True), (2, 512, 4, True), (2, 1024, 8, True)]
PAIR: tuple[Model, Model] = ((4, 512, 4, True), (2, 1024, 8, True))  # deep, wide: same parameters
TRICKS: tuple[Model, Model] = ((4, 512, 4, False), (4, 512, 4, True))  # without, with
GROUPS = ("high", "low")


@dataclass
class Fig3Row:
    job: str
    status: str
    source: str | None
    model: str | None
    L: int | None
    H: int | None
    A: int | None
    d: int | None
    tricks: bool
    params: int | None
    language: str | None = None
    corpus: str | None = None
    synthetic: bool | None = None
    resource: str | None = None
    train_pairs: int | None = None
    seed: int | None = None
    bleu: float | None = None
    nll: float | None = None
    sentences: int | None = None
    overall_bleu: float | None = None
    steps: int | None = None
    batch_tokens: int | None = None
    error: str | None = None


def label(m: Model) -> str:
    return f"T({m[0]},{m[1]},{m[2]})" + ("" if m[3] else " no tricks")


def _rows_of(job: str, m: RunMetrics) -> list[Fig3Row]:
    cfg = m.model.config if m.model else {}
    tricks = bool(cfg.get("ffn_init_scale")) and cfg.get("logit_clip") is not None
    L, H, A = cfg.get("L"), cfg.get("H"), cfg.get("A")
    langs = (m.eval.by_language if m.eval else None) or {}
    status, error = m.status, m.error
    if status == "ok" and not langs:
        status, error = "failed", "no eval.by_language in metrics.json (not a data.corpora run?)"

    def row(**per_language: object) -> Fig3Row:
        return Fig3Row(
            job,
            status,
            m.source,
            label((L, H, A, tricks)) if L and H and A else None,
            L,
            H,
            A,
            cfg.get("d"),
            tricks,
            m.model.param_count if m.model else None,
            seed=m.seed,
            overall_bleu=m.eval.bleu if m.eval else None,
            steps=m.steps,
            batch_tokens=m.batch_size,
            error=error,
            **per_language,  # type: ignore[arg-type]
        )

    if not langs:
        return [row()]
    keys = ("corpus", "synthetic", "resource", "train_pairs", "bleu", "nll", "sentences")
    return [row(language=lang, **{k: v.get(k) for k in keys}) for lang, v in langs.items()]


def _ok(rows: Sequence[Fig3Row]) -> list[Fig3Row]:
    return [r for r in rows if r.status == "ok" and r.bleu is not None]


def _key(r: Fig3Row) -> Model:
    return (r.L, r.H, r.A, r.tricks)  # type: ignore[return-value]


def languages(rows: Sequence[Fig3Row]) -> list[Fig3Row]:
    """Each language once, from most to least training data (the order of the paper's Fig. 3)."""
    seen: dict[str, Fig3Row] = {}
    for r in _ok(rows):
        seen.setdefault(str(r.language), r)
    return sorted(seen.values(), key=lambda r: (-(r.train_pairs or 0), str(r.language)))


def per_language(rows: Sequence[Fig3Row], m: Model, lang: str | None) -> Sample:
    return sample([r.bleu for r in _ok(rows) if _key(r) == m and r.language == lang])


def _by_seed(rows: Sequence[Fig3Row], m: Model, group: str | None) -> dict[int, float]:
    """BLEU averaged over a resource group's languages (all if None), per seed."""
    by: dict[int, list[float]] = {}
    for r in _ok(rows):
        if _key(r) == m and (group is None or r.resource == group):
            by.setdefault(int(r.seed or 0), []).append(float(r.bleu or 0))
    return {s: sum(v) / len(v) for s, v in by.items()}


def per_group(rows: Sequence[Fig3Row], m: Model, group: str | None) -> Sample:
    """BLEU averaged over a group's languages within each seed, over seeds."""
    return sample(list(_by_seed(rows, m, group).values()))


def _low_minus_high(rows: Sequence[Fig3Row], m: Model) -> Sample:
    """Per seed, low-resource minus high-resource BLEU (the same run)."""
    lo, hi = _by_seed(rows, m, "low"), _by_seed(rows, m, "high")
    return sample([lo[s] - hi[s] for s in sorted(lo.keys() & hi.keys())])


def claims(rows: Sequence[Fig3Row]) -> list[str]:
    """The paper's Fig. 3 claims, each judged from the numbers."""
    ran = {_key(r) for r in _ok(rows)}
    groups = [g for g in GROUPS if any(r.resource == g for r in _ok(rows))]
    out = ["### 1. BLEU rises with capacity", ""]
    ends: dict[str, tuple[Model, Model]] = {}
    for name, ladder in (("depth", DEPTH), ("width", WIDTH)):
        present = [m for m in ladder if m in ran]
        if len(present) < 2:
            out.append(f"- {name} ladder: fewer than two of {', '.join(map(label, ladder))} ran.")
            continue
        ends[name] = (present[0], present[-1])
        for g in groups:
            samples = [per_group(rows, m, g) for m in present]
            what = f"{name} ladder, {g}-resource BLEU"
            out.append(f"- {trend(samples, [label(m) for m in present], what, True)[0]}")
    out += ["", "### 2. ... most for low-resource languages", ""]
    if not ends:
        out.append("- no ladder with two models ran.")
    for name, (small, big) in ends.items():
        if set(groups) != set(GROUPS):
            out.append(f"- {name} ladder: needs both a high- and a low-resource language.")
            continue
        gain = {g: per_group(rows, big, g).mean - per_group(rows, small, g).mean for g in GROUPS}
        effect = RELATIVE_EFFECT * per_group(rows, small, None).mean
        c = compare(_low_minus_high(rows, small), _low_minus_high(rows, big), effect)
        more = "low" if gain["low"] > gain["high"] else "high"
        out.append(
            f"- {name} ladder, smallest -> largest: gain {gain['low']:+.2f} BLEU on low-resource vs "
            f"{gain['high']:+.2f} on high-resource; larger on **{more}**-resource; the difference "
            f"{c.text()}."
        )
    out += ["", "### 3. Deep beats wide on low-resource languages (same parameters)", ""]
    deep, wide = PAIR
    if deep in ran and wide in ran:
        for g in groups:
            d = compare(per_group(rows, wide, g), per_group(rows, deep, g))
            who = "deep" if d.delta > 0 else "wide"
            out.append(
                f"- {g}-resource: {label(deep)} {per_group(rows, deep, g).text()} vs {label(wide)} "
                f"{per_group(rows, wide, g).text()}: deep - wide = {d.text()}; **{who}** ahead."
            )
    else:
        out.append(f"- {label(deep)} or {label(wide)} did not run.")
    out += ["", "### 4. The trainability tricks (scaled feed-forward init, logit clipping)", ""]
    off, on = TRICKS
    if off in ran and on in ran:
        for grp in [None, *groups]:
            d = compare(per_group(rows, off, grp), per_group(rows, on, grp))
            out.append(f"- {grp or 'all'} languages: with - without = {d.text()}.")
    else:
        out.append(f"- {label(off)} or {label(on)} did not run.")
    return out


def markdown(rows: Sequence[Fig3Row], prov: Provenance) -> str:
    langs = languages(rows)
    models = sorted({_key(r) for r in _ok(rows)}, key=lambda m: (not m[3], m[0] * m[1], m[0]))
    params = {_key(r): r.params for r in _ok(rows)}
    cols = [
        f"{r.language} ({r.resource}, {r.train_pairs:,}{', synthetic' if r.synthetic else ''})"
        for r in langs
    ]
    lines = [
        *prov.page("Fig. 3 — many->English BLEU per language vs model capacity"),
        "",
        "BLEU (measured) on each language's test split, mean ± sd over seeds; `high`/`low` averages the "
        "group's languages within a seed first.",
        "",
        "| model | params | seeds | " + " | ".join(cols) + " | high | low |",
        "|---|---|---|" + "---|" * (len(cols) + 2),
    ]
    for m in models:
        n = len({r.seed for r in _ok(rows) if _key(r) == m})
        cells = [per_language(rows, m, r.language).text() for r in langs]
        groups = [per_group(rows, m, g).text() if per_group(rows, m, g).n else "—" for g in GROUPS]
        lines.append(f"| {label(m)} | {params[m]:,} | {n} | " + " | ".join(cells + groups) + " |")
    lines += [
        "",
        "## The paper's claims, judged from these numbers (`gpipe_repro.paper.stats`)",
        "",
        *claims(rows),
        "",
        RULE,
        "",
    ]
    failed = [r for r in rows if r.status != "ok"]
    if failed:
        lines += ["## Jobs that did not finish", ""]
        lines += [f"- {r.job}: {r.status}: {r.error}" for r in failed] + [""]
    synth = [str(r.language) for r in langs if r.synthetic]
    if synth:
        lines += [
            f"Synthetic sources (apertium machine translation of the English side): {', '.join(synth)}.",
            "",
        ]
    return "\n".join(lines)


def plot(rows: Sequence[Fig3Row], path: Path) -> None:
    langs = languages(rows)
    names = [f"{r.language}\n{r.resource}{'*' if r.synthetic else ''}" for r in langs]
    ran = {_key(r) for r in _ok(rows)}
    panels = [
        ("depth ladder", DEPTH),
        ("width ladder", WIDTH),
        ("deep vs wide; tricks", [*PAIR, TRICKS[0]]),
    ]
    # one colour per model in every panel
    every = list(dict.fromkeys([*DEPTH, *WIDTH, *PAIR, *TRICKS]))
    with figure(path, 1, 3, figsize=(14, 4), sharey=True) as (fig, axes):
        for ax, (title, models) in zip(axes, panels):
            for i, m in enumerate(x for x in models if x in ran):
                st = [per_language(rows, m, r.language) for r in langs]
                ax.errorbar(
                    [k + 0.06 * (i - 1) for k in range(len(langs))],
                    [s.mean for s in st],
                    yerr=[s.sd for s in st],
                    fmt="o-",
                    capsize=3,
                    color=f"C{every.index(m)}",
                    label=label(m),
                )
            ax.set_xticks(range(len(langs)), names)
            ax.set(title=title, xlabel="source language (most -> least data; * synthetic)")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        axes[0].set_ylabel("test BLEU (measured), mean ± sd over seeds")
        fig.suptitle("many->English, one model for all languages (in the manner of GPipe Fig. 3)")


class Fig3(Artefact[Fig3Row]):
    """Fig. 3: many->English BLEU per language against model capacity (GPipe §5)."""

    name = folder = page = "fig3"
    row = Fig3Row
    command = "gpipe-run -m experiment=fig3"
    sweep = True

    def collect(self, source: Path | None, opts: argparse.Namespace, out: Path) -> Report[Fig3Row]:
        assert source is not None  # make() asks for --from SWEEP first
        jobs = read_sweep(source)
        rows = [r for j in jobs for r in _rows_of(j.name, j.metrics)]
        return Report(rows, Provenance.of_jobs([j.metrics.env for j in jobs], source))

    def markdown(self, report: Report[Fig3Row]) -> str:
        return markdown(report.rows, report.provenance)

    def plot(self, report: Report[Fig3Row], path: Path) -> None:
        plot(report.rows, path)


ARTEFACT = Fig3()
