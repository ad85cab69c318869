"""Each translation target's quick variant end to end (``make table5-quick``, ``make fig3-quick``):
every job runs, and its report is written with each claim judged by the one rule (``paper.stats``).
Minutes each: ``make test-targets`` runs them, ``make test`` does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _shared import make

from gpipe_repro.paper.stats import BEYOND, INSIDE, UNTESTABLE

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = (BEYOND, INSIDE, UNTESTABLE)


def _make(target: str, root: Path) -> None:
    make(target, root, bound=540)


def _report(sweep: Path, name: str, jobs: int) -> str:
    runs = sorted(sweep.glob("*/metrics.json"))
    assert len(runs) == jobs, runs
    assert all(json.loads(p.read_text())["status"] == "ok" for p in runs)
    md = (sweep / "report" / f"{name}.md").read_text()
    assert (sweep / "report" / f"{name}.png").stat().st_size > 0
    assert any(v in md for v in VERDICTS), md[:2000]
    return md


@pytest.mark.target
@pytest.mark.timeout(600)
def test_table5_quick_writes_its_report(tmp_path):
    _make("table5-quick", tmp_path)
    md = _report(tmp_path / "table5", "table5", jobs=6)  # 3 runs x 2 seeds
    assert "token-matched" in md.lower() and "same updates" in md.lower().replace("-", " ")


@pytest.mark.target
@pytest.mark.timeout(600)
def test_fig3_quick_writes_both_reports(tmp_path):
    _make("fig3-quick", tmp_path)
    _report(tmp_path / "fig3", "fig3", jobs=6)  # 3 models x 2 seeds
    _report(tmp_path / "fig3_tricks", "fig3_tricks", jobs=4)  # with / without x 2 seeds
