"""``bench/engine.py``: a variant that fails is recorded in the results and shown on the page, and the
others still run (issue #34: on a GPU one failing variant stopped the whole benchmark)."""

from __future__ import annotations

import pytest
from _shared import bench_module


@pytest.fixture
def bench(monkeypatch):
    return bench_module("engine", monkeypatch)


def test_a_failing_variant_is_recorded_and_the_others_run(bench, monkeypatch, tmp_path):
    def broken(*args):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")

    calls: list[str] = []

    def rank_times(fn, K, *args):
        calls.append(fn.__name__)
        if fn is broken:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        return (0.010 if fn is bench.ours else 0.012), 3.0

    monkeypatch.setattr(bench, "rank_times", rank_times)
    monkeypatch.setattr(bench, "launch_one_thread", lambda fn, w, a: [[(0.011, 0.0115, 1, 1)] * 2])
    variants = {"ours_K1_s": (bench.ours, 1, ("never",)), "broken_s": (broken, 1, ())}
    res = {"failed": {}, "rows": [], "batch": 64}
    bench.collect(res, variants, [1, 4], S=2, W=0, repeats=2)
    assert res["failed"] == {
        "broken_s M=1": "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "broken_s M=4": "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    }
    assert calls.count("broken") == 2  # tried once per M, not again in the second repetition
    assert calls.count("ours") == 4  # every repetition of the working variant ran
    assert [r["ours_K1_s"] for r in res["rows"]] == [0.010, 0.010]
    assert [r["broken_s"] for r in res["rows"]] == [None, None]
    res["machine"] = {
        "cpu": "x",
        "cores": 2,
        "threads_per_rank": 1,
        "torch": "t",
        "device": "cuda",
        "gpus": ["G"],
    }
    res.update(model="m", steps=2, warmup=0, repeats=2, skipped={})
    bench.write_markdown(res, tmp_path / "engine.md")
    page = (tmp_path / "engine.md").read_text()
    assert "## What failed" in page and "broken_s M=1: RuntimeError: CUDA out of memory" in page


def test_the_page_opens_with_each_later_schedules_verdict_against_the_peer(bench):
    def row(schedule, M, ratio, ours_b, theirs_b):
        return {
            "schedule": schedule, "virtual_stages": 2, "theirs": f"torch_{schedule}", "M": M,
            "ratio": ratio, "ours_bubble": ours_b, "theirs_bubble": theirs_b,
        }  # fmt: skip

    res = {
        "schedules": {
            "rows": [
                row("interleaved", 2, 1.04, 0.2, 0.3),
                row("interleaved", 4, 1.05, 0.1, 0.2),
                row("zb-h1", 2, 0.99, 0.2, 0.1),
                row("zb-h1", 4, 1.02, 0.1, 0.2),
            ]
        }
    }
    lines = [x for x in bench._answer(res) if x]
    assert len(lines) == 2
    assert lines[0].startswith("- interleaved v=2 vs `torch_interleaved`")
    assert ": met, 1.040 at worst (M = 2)" in lines[0] and "ours ≤ theirs at every M." in lines[0]
    assert ": not met, 0.990 at worst (M = 2)" in lines[1] and "not at M = 2." in lines[1]


def test_the_bubble_is_the_span_less_every_ranks_computation(bench):
    # one step, K = 2: rank 0 computes 0-4 and 6-10 s, rank 1 2-10 s; the step spans 0-10 s
    spans = [[[(0.0, 4.0), (6.0, 10.0)]], [[(2.0, 10.0)]]]
    [(bubble, busy)] = bench._span_bubble(spans, 2)
    assert busy == (8.0 + 8.0) / 2
    assert bubble == pytest.approx(1 - 16.0 / 20.0)
    assert bench._span_bubble([[[]], [[]]], 2) == []  # a step with no computation is left out


def test_a_slower_cell_is_judged_and_its_gap_located(bench):
    row = {
        "schedule": "zb-h1", "virtual_stages": 2, "theirs": "torch_zb", "M": 4, "ratio": 0.95,
        "ours_s": 0.2, "theirs_s": 0.19, "ours_bubble": 0.10, "theirs_bubble": 0.15,
        "ours_busy_s": 0.18, "theirs_busy_s": 0.16,
        "ours_samples_s": [0.200, 0.201, 0.199, 0.202, 0.200],
        "theirs_samples_s": [0.190, 0.191, 0.189, 0.190, 0.192],
    }  # fmt: skip
    c = bench.judged(row)
    assert c is not None and c.beyond and 9.0 < c.delta < 11.0  # ms, ours slower
    [line] = [x for x in bench._answer({"schedules": {"rows": [row]}}) if x]
    assert (
        ": not met, 0.950 at worst (M = 4); at M = 4 the ratio is 0.950, ours − theirs +10.0 ms (means of the repetitions), "
        in line
    )
    assert "beyond the noise, p < 0.001" in line
    assert "our computation per rank +12.5% of theirs and our bubble 0.100 against 0.150" in line
    noisy = dict(row, ours_samples_s=[0.18, 0.23, 0.19, 0.22, 0.20])
    assert not bench.judged(noisy).beyond  # the same medians, a spread that hides the gap
