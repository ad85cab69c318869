"""``bench/sharing_directions.py``: every variant's two plans match message for message and cannot
deadlock; ``same`` and ``both`` add the same number of messages, ``both`` half of them flowing back;
bad input is one line and exit 2; the cost per extra message is read off the steps; and the plans
run on two real ranks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _shared import ENV, ROOT, bench_module


@pytest.fixture
def sd(monkeypatch):
    return bench_module("sharing_directions", monkeypatch)


def _messages(plans):
    """(sender, receiver, tag) of every send, and of every receive, over both ranks' plans."""
    sends, recvs = set(), set()
    for rank, ops in enumerate(plans):
        for op in ops:
            if op[0] == "send":
                sends.add((rank, op[1], op[2]))
            elif op[0] in ("recv", "irecv"):
                recvs.add((op[1], rank, op[2]))
    return sends, recvs


def _runs_to_the_end(plans) -> bool:
    """Whether both plans finish: a send returns at once and is done once received; a blocking
    receive needs its send posted; a phase's end needs its sends received and receives sent."""
    pc, posted, taken = [0, 0], set(), set()
    pending: list[list[tuple]] = [[], []]
    progress = True
    while progress:
        progress = False
        for rank, ops in enumerate(plans):
            while pc[rank] < len(ops):
                op = ops[pc[rank]]
                if op[0] == "send":
                    posted.add((rank, op[1], op[2]))
                    pending[rank].append(("sent", (rank, op[1], op[2])))
                elif op[0] in ("recv", "irecv"):
                    msg = (op[1], rank, op[2])
                    if op[0] == "recv" and msg not in posted:
                        break
                    taken.add(msg)  # a posted receive lets its send complete
                    if op[0] == "irecv":
                        pending[rank].append(("got", msg))
                elif op[0] == "wait":
                    if not all(m in (taken if k == "sent" else posted) for k, m in pending[rank]):
                        break
                    pending[rank] = []
                pc[rank] += 1
                progress = True
    return pc == [len(p) for p in plans]


@pytest.mark.parametrize("M", [1, 3, 8])
def test_each_variants_plans_match_and_run_to_the_end(sd, M):
    count = {}
    for variant in sd.VARIANTS:
        plans = [sd.plan(variant, M, r) for r in (0, 1)]
        sends, recvs = _messages(plans)
        assert sends == recvs and len(sends) == sum(op[0] == "send" for p in plans for op in p)
        assert _runs_to_the_end(plans)
        assert all(sum(op[0] == "spin" for op in p) == 2 * M for p in plans)
        count[variant] = sends
    pipeline = count["base"]
    assert len(pipeline) == 2 * M and not count["alone"]
    for variant in ("same", "both"):
        extra = count[variant] - pipeline
        assert pipeline <= count[variant] and len(extra) == 2 * M
        # a phase's extras leave its sending rank in `same`, its receiving rank in `both`
        forward = {(s, r) for s, r, t in extra if t - sd.EXTRA < M}
        backward = {(s, r) for s, r, t in extra if t - sd.EXTRA >= M}
        assert (forward, backward) == (
            ({(0, 1)}, {(1, 0)}) if variant == "same" else ({(1, 0)}, {(0, 1)})
        )


def test_a_plan_with_an_unknown_variant_is_refused(sd):
    with pytest.raises(ValueError, match="variant='up'"):
        sd.plan("up", 2, 0)


def test_bad_input_is_one_line_and_exit_2(sd, capsys):
    assert sd.main(["--rounds", "0"]) == 2
    assert sd.main(["--M", "0"]) == 2
    assert sd.main(["--work-ms", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert [e.split("=")[0].split()[-1] for e in err] == ["--rounds", "--M", "--work-ms"]


def test_the_cost_per_extra_message_is_read_off_the_steps(sd, monkeypatch, tmp_path):
    cost = {"base": 0.0, "same": 7e-4, "both": 3e-4}

    def fake_launch(fn, world, args, threads):
        Ms, work_s, order = args
        assert list(order) in (list(sd.VARIANTS), list(reversed(sd.VARIANTS)))
        out = {
            sd._key(v, M): [
                2 * M * work_s + 2 * M * cost.get(v, 0.0) + (0.002 if v != "alone" else 0)
            ]
            * 3
            for v in order
            for M in Ms
        }
        return [out, out]

    monkeypatch.setattr(sd, "launch", fake_launch)
    out = tmp_path / "d.json"
    assert sd.main(["--rounds", "2", "--M", "4", "16", "--json", str(out)]) == 0
    rows = {(r["variant"], r["M"]): r for r in json.loads(out.read_text())}
    for M in (4, 16):
        assert rows[("same", M)]["per_extra_message_s"] == pytest.approx(7e-4)
        assert rows[("both", M)]["per_extra_message_s"] == pytest.approx(3e-4)
        assert rows[("base", M)]["per_extra_message_s"] is None
        assert len(rows[("alone", M)]["rounds_s"]) == 2


def test_the_plans_run_on_two_real_ranks(sd, tmp_path):
    out = tmp_path / "d.json"
    args = ["--rounds", "1", "--M", "2", "--work-ms", "0.05", "--json", str(out)]
    script = ROOT / "bench" / "sharing_directions.py"  # a script: its ranks import it by path
    done = subprocess.run([sys.executable, str(script), *args], env=ENV, timeout=240)
    assert done.returncode == 0
    rows = json.loads(out.read_text())
    assert {r["variant"] for r in rows} == set(sd.VARIANTS)
    assert all(r["step_s"] > 0 for r in rows)
