"""Every paper artefact by its make target: ``python -m gpipe_repro.paper NAME`` and the sweep callback.

``sweep`` is no paper artefact: any sweep folder as a table, the demo's shape (``--from SWEEP``).
"""

from __future__ import annotations

from typing import Any

from . import (
    fig3,
    schedules,
    table1,
    table4,
    table5,
    throughput,
    validate_hw,
    validate_plan,
    validate_sim,
)
from .artefact import Artefact
from .sweep import Sweep

ARTEFACTS: dict[str, Artefact[Any]] = {
    a.name: a
    for a in (
        Sweep("demo", "the demo: GPipe's speed-up and synchronous update, K x M on digits (§2.3)"),
        table1.ARTEFACT,
        throughput.TABLE2,
        throughput.TABLE3,
        table4.ARTEFACT,
        table5.ARTEFACT,
        fig3.ARTEFACT,
        fig3.TRICKS,
        validate_sim.ARTEFACT,
        validate_hw.ARTEFACT,
        validate_plan.ARTEFACT,
        schedules.ARTEFACT,
        Sweep("sweep", "any sweep folder as a table (--from SWEEP; never published)"),
    )
}
