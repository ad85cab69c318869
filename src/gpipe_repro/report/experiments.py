"""Experiments with a report of their own: which module writes it, and the header every such report has.

An experiment listed in ``REPORTS`` gets, besides the generic sweep table (``report.gather``), its own
report written by ``<module>.write(sweep, out, header)`` into ``<sweep>/report/``; the callback
(``report.callback``) publishes that one to ``reports/<experiment>/`` when the sweep was the
experiment's make target. Each module also re-runs on its own: ``python -m <module> SWEEP``.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["REPORTS", "experiment_report", "hardware_header"]

REPORTS: dict[str, str] = {
    "table5": "gpipe_repro.report.table5",
    "fig3": "gpipe_repro.report.fig3",
}


def experiment_report(
    experiment: str | None,
) -> Callable[[Path, Path, str], dict[str, Path]] | None:
    """The ``write`` function of ``experiment``'s own report, or None."""
    if experiment not in REPORTS:
        return None
    write: Callable[[Path, Path, str], dict[str, Path]] = importlib.import_module(
        REPORTS[str(experiment)]
    ).write
    return write


def hardware_header(sweep: Path, command: str) -> str:
    """Where and how the numbers were measured: the command, the jobs' devices, threads, torch and commit."""
    envs: list[dict[str, Any]] = []
    for path in sorted(sweep.glob("*/metrics.json")):
        try:
            envs.append(json.loads(path.read_text()).get("env") or {})
        except (OSError, json.JSONDecodeError):
            continue
    devices = sorted({d for e in envs for d in e.get("device_names") or []})
    threads = sorted({int(e["threads_per_rank"]) for e in envs if e.get("threads_per_rank")})
    commits = sorted({str(e["git_commit"]) for e in envs if e.get("git_commit")})
    torch = sorted({str(e["torch"]) for e in envs if e.get("torch")})
    return (
        f"Generated from {len(envs)} job(s) in `{sweep}` by `{command}`. Measured on "
        f"{', '.join(devices) or 'unknown devices'}, {'/'.join(map(str, threads)) or '?'} thread(s) per rank, "
        f"torch {', '.join(torch) or '?'}, commit {', '.join(c[:10] for c in commits) or '?'}."
    )
