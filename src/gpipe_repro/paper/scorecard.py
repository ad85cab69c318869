"""``reports/README.md`` — does the paper hold? Every claim of GPipe with its computed verdict (``make scorecard``).

One row per claim of ``paper.claims``, judged by its rule from the committed report's files alone, so
the page renders byte for byte the same from any copy of ``reports/`` (no clock, host or git).

    python -m gpipe_repro.paper.scorecard                  # writes reports/README.md
    python -m gpipe_repro.paper.scorecard --check          # exit 1 when reports/README.md is stale
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from .claims import registry
from .provenance import FILE, Provenance
from .template import _environment
from .verdict import TOLERANCE, VERDICTS

OUT = "README.md"


def summary(reports: Path) -> dict[str, Any]:
    """What the scorecard says, from the report folders under ``reports``: every claim with its
    finding, how many have each verdict, and each report folder with its provenance (None: none)."""
    claims = [(c, c.find(reports / c.report)) for c in registry()]
    counts = Counter(f.verdict for _, f in claims)
    made = [
        (d, Provenance.load(reports / d) if (reports / d / FILE).exists() else None)
        for d in sorted({c.report for c, _ in claims})
    ]
    return {"claims": claims, "counts": [(v, counts[v]) for v in VERDICTS], "tolerance": TOLERANCE,
            "made": made}  # fmt: skip


def render(reports: Path) -> str:
    return _environment().get_template("scorecard.md.j2").render(**summary(reports))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpipe_repro.paper.scorecard", description=__doc__)
    ap.add_argument("--reports", type=Path, default=Path("reports"), help="the reports' folder")
    ap.add_argument("--check", action="store_true", help=f"only say whether {OUT} is current")
    a = ap.parse_args(argv)
    if not a.reports.is_dir():
        print(f"scorecard: error: --reports {a.reports} is not a folder", file=sys.stderr)
        return 2
    page, path = render(a.reports), a.reports / OUT
    if a.check:
        same = path.exists() and path.read_text() == page
        print(f"{path}: {'current' if same else 'stale: run make scorecard'}")
        return 0 if same else 1
    path.write_text(page)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
