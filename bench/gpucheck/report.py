"""``reports/gpu/``: the page (``gpu.md``, a Jinja2 template filled from the steps' results), every
number as data (``results.csv``, long: step, case, quantity, value; ``results.json``) and where they
come from (``provenance.json``, the paper artefacts' ``Provenance``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import Template
from tabulate import tabulate

from gpipe_repro.paper.gpu_rows import GpuCheckRow, long_rows
from gpipe_repro.typed_csv import write_csv

__all__ = ["write"]

PAGE = Template(
    """{{ header }}

{% if dry %}**Dry run on the CPU** (`bench/gpu_check.py --dry-run`): every step at tiny sizes, to exercise the
code; no number here is a GPU's.

{% endif %}Wall time: {{ "%.0f"|format(total_s) }} s in all ({{ "%.0f"|format(setup_s) }} s set-up, {{ "%.0f"|format(steps_s) }} s of steps) against the {{ target_s }} s a lent GPU host gives: **{{ "met" if total_s <= target_s else "not met" }}**.
Outcome: **{{ verdict }}**.

## Devices

{{ devices }}

## Steps

{{ steps }}
{% for s in sections %}
## {{ s.title }}

{{ s.about }}

{{ s.table }}
{% for n in s.notes %}
{{ n }}
{% endfor %}{% if s.failed %}
Failed:
{% for k in s.failed %}- {{ k }}
{% endfor %}{% endif %}{% if s.skipped %}
Left out:
{% for k in s.skipped %}- {{ k }}
{% endfor %}{% endif %}{% endfor %}
{% if records %}
## What the gpu tests measured (`records.jsonl`)

{% for r in records %}- {{ r }}
{% endfor %}{% endif %}"""
)


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "—" if v is None else v


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return tabulate([[_fmt(r.get(k)) for k in keys] for r in rows], keys, tablefmt="github")


def write(
    out: Path,
    res: dict[str, Any],
    titles: dict[str, tuple[str, str]],
    header: list[str],
) -> list[Path]:
    """The page, the CSV and ``results.json`` from ``res`` (the driver's: devices, steps, outputs);
    ``titles``: per step, (title, what it measures)."""
    sections = []
    for name, (title, about) in titles.items():
        got = res["outputs"].get(name)
        if got is None:
            continue
        sections.append(
            {
                "title": title,
                "about": about,
                "table": _table(got["rows"]),
                "notes": got["notes"],
                "skipped": got["skipped"],
                "failed": got.get("failed", []),
            }
        )
    steps = [
        {"step": k, "status": s["status"], "seconds": s["seconds"], "budget_s": s["budget_s"]}
        for k, s in res["steps"].items()
    ]
    records = []
    rec = out / "records.jsonl"
    if rec.exists():
        for line in rec.read_text().splitlines():
            if line.strip():
                d = json.loads(line)
                test = d.pop("test", "?")
                records.append(
                    f"**{test}**: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in d.items())
                )
    page = PAGE.render(
        header="\n".join(header),
        dry=res["dry_run"],
        total_s=res["total_s"],
        setup_s=res["setup_s"],
        steps_s=res["steps_s"],
        target_s=res["target_s"],
        verdict=res["verdict"],
        devices=_table(res["devices"]),
        steps=_table(steps),
        sections=sections,
        records=records,
    )
    (out / "gpu.md").write_text(page.rstrip("\n") + "\n")
    write_csv(out / "results.csv", GpuCheckRow, long_rows(res["outputs"]))
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    return [out / "gpu.md", out / "results.csv", out / "results.json"]
