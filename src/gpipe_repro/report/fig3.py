"""Fig. 3 report: many->English BLEU per language against model capacity, high- vs low-resource.

Reads the ``metrics.json`` of every job of a ``gpipe-run -m experiment=fig3`` sweep (one job per model
size and seed; each job one model trained on all languages at once, scored per language in
``eval.by_language``) and writes ``results.csv`` (one row per job and language), ``fig3.md`` (BLEU
per model and language, mean ± sd over seeds, grouped high/low resource; the paper's four claims, each
judged from the numbers by ``report.noise``) and ``fig3.png`` (BLEU per language, languages ordered
from most to least data as in the paper's Fig. 3, one line per model, error bars over seeds).

The comparisons are fixed here: a depth ladder T(1|2|4, 512, 4), a width ladder T(2, 256|512|1024,
2|4|8), the parameter-matched deep/wide pair T(4, 512, 4) / T(2, 1024, 8), and T(4, 512, 4) with and
without the trainability tricks; a model the sweep did not run is reported as missing.
Re-run on any sweep folder: ``python -m gpipe_repro.report.fig3 multirun/<date>/<time> [--out DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .experiments import hardware_header
from .noise import Stat, describe_trend, diff, stat

__all__ = ["COLUMNS", "DEPTH", "WIDTH", "PAIR", "TRICKS", "load_rows", "write", "main"]

Model = tuple[int, int, int, bool]  # L, H, A, tricks
DEPTH: list[Model] = [(1, 512, 4, True), (2, 512, 4, True), (4, 512, 4, True)]
WIDTH: list[Model] = [(2, 256, 2, True), (2, 512, 4, True), (2, 1024, 8, True)]
PAIR: tuple[Model, Model] = ((4, 512, 4, True), (2, 1024, 8, True))  # deep, wide: same parameters
TRICKS: tuple[Model, Model] = ((4, 512, 4, False), (4, 512, 4, True))  # without, with
GROUPS = ("high", "low")
COLUMNS = [
    "job",
    "status",
    "source",
    "model",
    "L",
    "H",
    "A",
    "d",
    "tricks",
    "params",
    "language",
    "corpus",
    "synthetic",
    "resource",
    "train_pairs",
    "seed",
    "bleu",
    "nll",
    "sentences",
    "overall_bleu",
    "steps",
    "batch_tokens",
    "error",
]


def label(m: Model) -> str:
    return f"T({m[0]},{m[1]},{m[2]})" + ("" if m[3] else " no tricks")


def _rows_of(job: str, m: dict[str, Any]) -> list[dict[str, Any]]:
    cfg = (m.get("model") or {}).get("config") or {}
    ev = m.get("eval") or {}
    tricks = bool(cfg.get("ffn_init_scale")) and cfg.get("logit_clip") is not None
    key = (cfg.get("L"), cfg.get("H"), cfg.get("A"), tricks)
    base = {
        "job": job,
        "status": m.get("status"),
        "source": m.get("source"),
        "model": label(key) if None not in key else None,  # type: ignore[arg-type]
        "L": key[0],
        "H": key[1],
        "A": key[2],
        "d": cfg.get("d"),
        "tricks": tricks,
        "params": (m.get("model") or {}).get("param_count"),
        "seed": m.get("seed"),
        "overall_bleu": ev.get("bleu"),
        "steps": m.get("steps"),
        "batch_tokens": m.get("batch_size"),
        "error": m.get("error"),
    }
    langs = ev.get("by_language") or {}
    if m.get("status") == "ok" and not langs:
        base = {
            **base,
            "status": "failed",
            "error": "no eval.by_language in metrics.json (not a data.corpora run?)",
        }
    if not langs:
        return [
            {
                **base,
                **{
                    c: None
                    for c in (
                        "language",
                        "corpus",
                        "synthetic",
                        "resource",
                        "train_pairs",
                        "bleu",
                        "nll",
                        "sentences",
                    )
                },
            }
        ]
    return [
        {
            **base,
            "language": lang,
            "corpus": v.get("corpus"),
            "synthetic": v.get("synthetic"),
            "resource": v.get("resource"),
            "train_pairs": v.get("train_pairs"),
            "bleu": v.get("bleu"),
            "nll": v.get("nll"),
            "sentences": v.get("sentences"),
        }
        for lang, v in langs.items()
    ]


def load_rows(sweep: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(sweep.glob("*/metrics.json")):
        try:
            m = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            m = {"status": "failed", "error": f"unreadable metrics.json: {err}"}
        rows += _rows_of(path.parent.name, m)
    return rows


def _ok(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["status"] == "ok" and r["bleu"] is not None]


def _key(r: dict[str, Any]) -> Model:
    return (r["L"], r["H"], r["A"], r["tricks"])


def languages(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each language once, from most to least training data (the order of the paper's Fig. 3)."""
    seen: dict[str, dict[str, Any]] = {}
    for r in _ok(rows):
        seen.setdefault(r["language"], r)
    return sorted(seen.values(), key=lambda r: (-(r["train_pairs"] or 0), r["language"]))


def per_language(rows: Sequence[dict[str, Any]], m: Model, lang: str) -> Stat:
    return stat([r["bleu"] for r in _ok(rows) if _key(r) == m and r["language"] == lang])


def per_group(rows: Sequence[dict[str, Any]], m: Model, group: str | None) -> Stat:
    """BLEU averaged over a resource group's languages (all if None) within each seed, then over seeds."""
    by_seed: dict[int, list[float]] = {}
    for r in _ok(rows):
        if _key(r) == m and (group is None or r["resource"] == group):
            by_seed.setdefault(r["seed"], []).append(r["bleu"])
    return stat([sum(v) / len(v) for v in by_seed.values()])


def claims(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The paper's Fig. 3 claims, each judged from the numbers."""
    ran = {_key(r) for r in _ok(rows)}
    groups = [g for g in GROUPS if any(r["resource"] == g for r in _ok(rows))]
    out = ["### 1. BLEU rises with capacity", ""]
    gains: dict[str, dict[str, Any]] = {}
    for name, ladder in (("depth", DEPTH), ("width", WIDTH)):
        present = [m for m in ladder if m in ran]
        if len(present) < 2:
            out.append(f"- {name} ladder: fewer than two of {', '.join(map(label, ladder))} ran.")
            continue
        for g in groups:
            text, _ = describe_trend(
                [per_group(rows, m, g) for m in present],
                [label(m) for m in present],
                f"{name} ladder, {g}-resource BLEU",
                True,
            )
            out.append(f"- {text}")
            gains.setdefault(name, {})[g] = diff(
                per_group(rows, present[0], g), per_group(rows, present[-1], g)
            )
    out += ["", "### 2. ... most for low-resource languages", ""]
    if not gains:
        out.append("- no ladder with two models ran.")
    for name, by_group in gains.items():
        if "high" in by_group and "low" in by_group:
            hi, lo = by_group["high"], by_group["low"]
            if hi.se is None or lo.se is None:
                out.append(
                    f"- {name} ladder: gain low {lo.delta:+.2f} vs high {hi.delta:+.2f} BLEU (one seed)."
                )
                continue
            se = math.sqrt(hi.se**2 + lo.se**2)
            where = "beyond" if abs(lo.delta - hi.delta) > 2 * se else "inside"
            more = "low" if lo.delta > hi.delta else "high"
            out.append(
                f"- {name} ladder, smallest -> largest: gain {lo.delta:+.2f} BLEU on low-resource vs "
                f"{hi.delta:+.2f} on high-resource; larger on **{more}**-resource, the difference "
                f"({lo.delta - hi.delta:+.2f} ± {se:.2f}) {where} the seed noise."
            )
        else:
            out.append(f"- {name} ladder: needs both a high- and a low-resource language.")
    out += ["", "### 3. Deep beats wide on low-resource languages (same parameters)", ""]
    deep, wide = PAIR
    if deep in ran and wide in ran:
        for g in groups:
            d = diff(per_group(rows, wide, g), per_group(rows, deep, g))
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
            d = diff(per_group(rows, off, grp), per_group(rows, on, grp))
            out.append(f"- {grp or 'all'} languages: with - without = {d.text()}.")
    else:
        out.append(f"- {label(off)} or {label(on)} did not run.")
    return out


def _markdown(rows: Sequence[dict[str, Any]], header: str) -> str:
    langs = languages(rows)
    models = sorted({_key(r) for r in _ok(rows)}, key=lambda m: (not m[3], m[0] * m[1], m[0]))
    params = {_key(r): r["params"] for r in _ok(rows)}
    cols = [
        f"{r['language']} ({r['resource']}, {r['train_pairs']:,}{', synthetic' if r['synthetic'] else ''})"
        for r in langs
    ]
    lines = [
        "# Fig. 3 — many->English BLEU per language vs model capacity",
        "",
        header,
        "",
        "BLEU (measured) on each language's test split, mean ± sd over seeds; `high`/`low` averages the "
        "group's languages within a seed first.",
        "",
        "| model | params | seeds | " + " | ".join(cols) + " | high | low |",
        "|---|---|---|" + "---|" * (len(cols) + 2),
    ]
    for m in models:
        n = len({r["seed"] for r in _ok(rows) if _key(r) == m})
        cells = [per_language(rows, m, r["language"]).text() for r in langs]
        groups = [per_group(rows, m, g).text() if per_group(rows, m, g).n else "—" for g in GROUPS]
        lines.append(f"| {label(m)} | {params[m]:,} | {n} | " + " | ".join(cells + groups) + " |")
    failed = [r for r in rows if r["status"] != "ok"]
    lines += [
        "",
        "## The paper's claims, judged from these numbers (`gpipe_repro.report.noise`)",
        "",
        *claims(rows),
        "",
        "Rule: a difference is beyond the seed noise when the means differ by more than "
        "2 standard errors of the difference (Welch).",
        "",
    ]
    if failed:
        lines += [
            "## Jobs that did not finish",
            "",
            *[f"- {r['job']}: {r['status']}: {r['error']}" for r in failed],
            "",
        ]
    synth = [r["language"] for r in langs if r["synthetic"]]
    if synth:
        lines += [
            f"Synthetic sources (apertium machine translation of the English side): {', '.join(synth)}.",
            "",
        ]
    return "\n".join(lines)


def _plot(rows: Sequence[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    langs = languages(rows)
    names = [f"{r['language']}\n{r['resource']}{'*' if r['synthetic'] else ''}" for r in langs]
    ran = {_key(r) for r in _ok(rows)}
    panels = [
        ("depth ladder", DEPTH),
        ("width ladder", WIDTH),
        ("deep vs wide; tricks", [*PAIR, TRICKS[0]]),
    ]
    every = list(
        dict.fromkeys([*DEPTH, *WIDTH, *PAIR, *TRICKS])
    )  # one colour per model in every panel
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharey=True)
    for ax, (title, models) in zip(axes, panels):
        for i, m in enumerate(x for x in models if x in ran):
            st = [per_language(rows, m, r["language"]) for r in langs]
            xs = [k + 0.06 * (i - 1) for k in range(len(langs))]
            ax.errorbar(
                xs,
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(sweep: Path, out: Path, header: str = "") -> dict[str, Path]:
    """results.csv, fig3.md and fig3.png for the sweep folder ``sweep``, in ``out``."""
    rows = load_rows(sweep)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "md": out / "fig3.md", "png": out / "fig3.png"}
    with paths["csv"].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    paths["md"].write_text(_markdown(rows, header or f"Generated from `{sweep}`."))
    _plot(rows, paths["png"])
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gpipe_repro.report.fig3", description=__doc__.splitlines()[0]
    )
    ap.add_argument("sweep", type=Path, help="a fig3 sweep folder (multirun/<date>/<time>)")
    ap.add_argument(
        "--out", type=Path, default=None, help="where to write (default: <sweep>/report)"
    )
    args = ap.parse_args(argv)
    if not any(args.sweep.glob("*/metrics.json")):
        print(f"fig3: error: no */metrics.json under {args.sweep}", file=sys.stderr)
        return 1
    command = f"python -m gpipe_repro.report.fig3 {args.sweep}"
    paths = write(
        args.sweep, args.out or args.sweep / "report", hardware_header(args.sweep, command)
    )
    print(paths["md"].read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
