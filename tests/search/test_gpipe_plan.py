"""gpipe-plan (issue #19): the search is exact under its pruning, never proposes a candidate over the
cap, and refuses bad input in one line; per-stage remat in the partitioner, simulator and planner."""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

from gpipe_repro.config.compose import compose
from gpipe_repro.engine.errors import ArgumentError
from gpipe_repro.engine.partition import balance_by_cells, balance_by_cost
from gpipe_repro.engine.pipeline import DEFAULT_LOOKAHEAD
from gpipe_repro.engine.schedule import (
    gradients_taken,
    peak_in_flight,
    receives_ahead,
    stage_actions,
)
from gpipe_repro.memory.activations import StageActivation, peak_activation_bytes
from gpipe_repro.memory.stages import plan_stages
from gpipe_repro.runplan.plan import plan_model
from gpipe_repro.search.__main__ import main, plan
from gpipe_repro.search.space import _coef, _hold, alive
from gpipe_repro.sim import Link, StageCost, simulate

GiB = 2**30
# the default model (an MLP on digits) on a published device: planned in about a second
BASE = ["hardware=tpu_v3", "model.hidden=1024"]
# tight: one micro-batch's working set (the 1024 x 1024 weight gradient before it is accumulated,
# 4 MiB) counted, 81 candidates fit on 4 devices (32 at 0.025 GiB)
CAP = "plan.memory_gib=0.028"


def test_pruning_keeps_the_exhaustive_ranking_and_no_row_exceeds_the_cap(tmp_path):
    pruned, _ = plan([*BASE, "plan.devices=4", CAP, "plan.top=4", f"plan.out={tmp_path}/a"])
    full, _ = plan([*BASE, "plan.devices=4", CAP, "plan.top=2000", f"plan.out={tmp_path}/b"])
    assert len(full) > 40  # nothing pruned: every candidate that fits was simulated
    assert [c.samples_per_s for c in pruned] == [c.samples_per_s for c in full[:4]]
    for c in full:
        assert max(c.stage_bytes) <= 0.028 * GiB  # planned exactly
        assert c.bound_s <= c.step_s * (1 + 1e-9)  # the bound pruning relies on
        assert c.K * c.replicas <= 4 and c.batch_size == 64
    rates = [c.samples_per_s for c in full]
    assert rates == sorted(rates, reverse=True)
    assert any(len(set(c.checkpoint)) == 2 for c in full)  # per-stage remat vectors are searched


def test_the_bound_stays_below_every_simulated_step_under_remat(tmp_path):
    # an AmoebaNet under a cap that forces remat: the simulator recomputes early, so a bound that
    # put the earlier stages' recompute on the gradient's way back exceeded 27 of these 242 steps
    # (25 of 226 at the default model.L=6, which takes twice as long to plan)
    args = ["model=amoebanet_d", "model.L=3", "data=synthetic", "data.kind=image"]
    args += ["data.image_size=32"]
    args += ["hardware=tpu_v3", "plan.devices=4", "train.batch_size=64", "plan.memory_gib=0.02"]
    full, _ = plan([*args, "plan.top=5000", f"plan.out={tmp_path}"])
    assert sum("always" in c.checkpoint and c.K > 1 for c in full) > 10
    assert all(c.bound_s <= c.step_s * (1 + 1e-9) for c in full)


def test_the_cap_binds_and_fit_fills_it(tmp_path):
    loose, _ = plan([*BASE, "plan.devices=2", "plan.memory_gib=1", f"plan.out={tmp_path}/a"])
    tight, _ = plan([*BASE, "plan.devices=2", CAP, f"plan.out={tmp_path}/b"])
    assert max(loose[0].stage_bytes) > 0.028 * GiB  # the loose pick would not fit the tight cap
    assert max(tight[0].stage_bytes) <= 0.028 * GiB
    fit, _ = plan([*BASE, "plan.devices=2", CAP, "plan.batch_size=fit", f"plan.out={tmp_path}/c"])
    assert fit[0].batch_size > 64 and max(fit[0].stage_bytes) <= 0.028 * GiB


def test_cli_prints_the_table_and_command_and_writes_the_files(tmp_path, capsys):
    assert main([*BASE, "plan.devices=2", CAP, f"plan.out={tmp_path}"]) == 0
    out = capsys.readouterr().out
    pick = next(ln for ln in out.splitlines() if ln.startswith("the pick: gpipe-run "))
    rows = list(csv.DictReader(open(tmp_path / "plan.csv")))
    best = rows[0]
    assert f"pipeline.K={best['K']} " in pick and f"pipeline.M={best['M']} " in pick
    assert "faster than the runner-up" in out and "candidates scored" in out
    assert (tmp_path / "plan.md").read_text().count("\n| ") == len(rows) + 1


def test_console_script_runs_the_module():
    r = subprocess.run(
        [sys.executable, "-m", "gpipe_repro.search", "plan.devices=0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stderr.strip().startswith("gpipe-plan: error: plan.devices=0")


def test_balance_by_cells_equals_balance_by_cost_and_respects_forbidden_cells():
    costs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    L, K = len(costs), 3
    p = np.concatenate([[0.0], np.cumsum(costs)])
    seg = np.where(np.arange(L + 1)[:, None] < np.arange(L + 1), p[None, :] - p[:, None], np.inf)
    assert balance_by_cells(np.broadcast_to(seg, (K, L + 1, L + 1))) == balance_by_cost(costs, K)
    cells = np.array([seg] * K)
    cells[0, 0, 3:] = np.inf  # the first cell may hold at most two layers
    bal = balance_by_cells(cells)
    assert bal[0] <= 2 and sum(bal) == L


def test_per_stage_remat_in_the_memory_planner_and_the_simulator():
    spec = compose(["pipeline.K=2", "pipeline.M=4"])
    m = plan_model(spec)
    kw = dict(K=2, M=4, micro_batch=8, schedule="gpipe", key="per-stage-test")
    args = (m.layers, m.info.example, m.model.planning_loss, [3, 3])
    never = plan_stages(*args, checkpoint="never", **kw)
    always = plan_stages(*args, checkpoint="always", **kw)
    mixed = plan_stages(*args, checkpoint=["never", "always"], **kw)
    assert mixed == [never[0], always[1]] and never[1] != always[1]
    st = [StageCost(1.0, 0.5, 2.0, 100), StageCost(1.5, 0.7, 2.5, 0)]
    link = Link(0.0, 1e12)
    sims = {
        tuple(v): simulate(2, 4, "gpipe", v, st, link).busy_s
        for v in (["never", "never"], ["always", "always"], ["never", "always"])
    }
    assert sims[("never", "always")] == [sims[("never", "never")][0], sims[("always", "always")][1]]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("mode", ["never", "always"])
def test_the_closed_forms_the_search_uses_are_the_planner_walk(schedule, mode):
    """Exact where no receive is posted ahead (lookahead 1) and no send outlives a recompute
    (remat never); else a bound from above: with the engine's lookahead the closed form counts
    the most receives of each kind at once (at most one lookahead of receives more than the
    walk), and under remat every output sent while the micro-batches alive are (at most one more:
    the walk frees a send when its gradient arrives, after its recompute)."""
    a = StageActivation(input=7, saved=11, output=13, weights=5, work=17, work_fixed=19, sent=23)
    for K, M in [(1, 1), (2, 4), (3, 2), (4, 8), (8, 3), (2, 32)]:
        for k in range(K):
            for lookahead in (1, DEFAULT_LOOKAHEAD):
                ci, cs, co, cw, cx, ck = _coef(schedule, mode, K, M, k, lookahead)
                assert ck == 0  # one backward: nothing kept for a W
                walk = peak_activation_bytes(a, schedule, mode, K, M, k, lookahead=lookahead)
                # the working set once on top (``Space._bytes``)
                closed = ci * 7 + cs * 11 + co * 13 + cw * 5 + cx * 23 + 17 + 19
                if lookahead == 1 and mode == "never":
                    assert closed == walk, (K, M, k)
                slack = (lookahead - 1) * (7 + 23) + (23 if mode == "always" else 0)
                assert walk <= closed <= walk + slack, (K, M, k, lookahead)
            assert alive(schedule, K, M, k) == peak_in_flight(schedule, K, M, k)
    with pytest.raises(ArgumentError, match="schedule='zb-h2' is unknown"):
        alive("zb-h2", 4, 8, 0)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_searchs_closed_forms_of_the_transfers_are_the_engines_walks(schedule):
    """The input-sized buffers beyond those alive: at every action, (alive + gradient sends held +
    activation receives posted ahead) within (most alive + the bound), reached at some action;
    gradient receives posted ahead: at least the most at any action, exactly under gpipe."""
    for K in range(1, 10):
        for M in (1, 2, 3, 5, 8, 16, 33):
            for k in range(K):
                for lookahead in (1, 2, DEFAULT_LOOKAHEAD, 7):
                    h = _hold(schedule, K, M, k, lookahead)
                    ahead = receives_ahead(schedule, K, M, k, lookahead)
                    sums = _transfer_walk(schedule, K, M, k, ahead)
                    assert max(sums) == h.alive + h.inputs, (K, M, k, lookahead)
                    most_b = max(b for _, b in ahead)
                    assert h.ahead_b >= most_b, (K, M, k, lookahead)
                    if schedule == "gpipe":
                        assert h.ahead_b == most_b and h.inputs == 0, (K, M, k, lookahead)


def _transfer_walk(schedule, K, M, k, ahead):
    """Per action: micro-batches alive + input gradients sent and not known taken + activation
    receives posted ahead, walked on the engine's own action lists."""
    taken = gradients_taken(schedule, K, M, k)
    alive, held, sums = 0, set(), []
    for i, a in enumerate(stage_actions(schedule, K, M, k)):
        if a.kind == "F":
            held -= {mb for _, mb in taken.get((a.chunk, a.mb), [])}
            alive += 1
        sums.append(alive + len(held) + ahead[i][0])
        if a.kind == "B":
            alive -= 1
            if k > 0:
                held.add(a.mb)
    return sums
