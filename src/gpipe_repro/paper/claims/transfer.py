"""The claims of §4 (Table 4), judged from ``reports/table4/`` (``runs.csv``, ``plan.json``).

The paper's numbers — AmoebaNet-B(18, 512) at 84.4% top-1 on ImageNet, and fine-tuned on seven
datasets at 480x480 — need ImageNet, those datasets and TPU-scale compute: not testable here
(``translation.unavailable``, the reason in ``claims.yaml``). Its claim that a pre-trained network
fine-tuned on a new task does better than training that task from scratch is tested small
(``reports/table4``): fine-tuned against scratch on targets of the pre-training's domain — the
paper's targets are natural images like ImageNet's —, each by ``paper.stats``; the cross-domain
targets (clothing -> digits) are outside the paper's design and named in the reason. The finding
is worded by ``templates/claims_transfer.md.j2``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...typed_csv import read_csv
from ..stats import Comparison
from ..table4.results import RunRow, group, versus
from ..verdict import Finding, seeded
from . import Missing, worded

SAME = "same domain"  # RunRow.domain of a target of the pre-training's domain


def transfer(folder: Path) -> Finding:
    runs, plan = folder / "runs.csv", folder / "plan.json"
    if not runs.exists() or not plan.exists():
        raise Missing("no runs.csv and plan.json")
    order = [t["key"] for t in json.loads(plan.read_text()).get("targets") or []]
    groups = group(read_csv(runs, RunRow), order)
    same: list[tuple[str, Comparison]] = []
    other: list[tuple[str, Comparison]] = []
    for (target, init, K), g in groups.items():
        s = groups.get((target, "scratch", 1))
        if init != "pretrained" or K != 1 or s is None:
            continue
        c = versus(g, s)[0]
        if c is not None:
            (same if g.first.domain.startswith(SAME) else other).append((g.first.label, c))
    if not same:
        raise Missing("no target of the pre-training's domain ran both ways")
    return worded("claims_transfer", "transfer", seeded([(c, 1) for _, c in same]), same=same,
                  other=other)  # fmt: skip
