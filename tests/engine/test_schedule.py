import pytest

from gpipe_repro.engine.errors import ArgumentError
from gpipe_repro.engine.schedule import bubble_fraction, peak_in_flight, stage_actions


def names(name, K, M):
    return [" ".join(str(a) for a in stage_actions(name, K, M, k)) for k in range(K)]


def test_gpipe_is_fill_drain():
    assert names("gpipe", 3, 4) == [
        "F0 F1 F2 F3 B3 B2 B1 B0",
        "F0 F1 F2 F3 B3 B2 B1 B0",
        "F0 F1 F2 F3 B3 B2 B1 B0",
    ]


def test_1f1b_warms_up_then_alternates():
    assert names("1f1b", 3, 4) == [
        "F0 F1 F2 B0 F3 B1 B2 B3",
        "F0 F1 B0 F2 B1 F3 B2 B3",
        "F0 B0 F1 B1 F2 B2 F3 B3",
    ]


def test_1f1b_keeps_fewer_micro_batches_alive():
    assert peak_in_flight("gpipe", 4, 8, 0) == 8
    assert [peak_in_flight("1f1b", 4, 8, k) for k in range(4)] == [4, 3, 2, 1]
    assert [peak_in_flight("1f1b", 4, 2, k) for k in range(4)] == [2, 2, 2, 1]  # min(K - k, M)


def test_an_unknown_schedule_has_no_in_flight_count():
    with pytest.raises(ArgumentError, match="schedule='zb' is unknown"):
        peak_in_flight("zb", 4, 8, 0)


def test_bubble_formula():
    # GPipe §2.3: (K-1)/(M+K-1); no bubble with one stage, and it shrinks as M grows.
    assert bubble_fraction(1, 8) == 0.0
    assert bubble_fraction(4, 1) == 3 / 4
    assert bubble_fraction(4, 32) < bubble_fraction(4, 4) < bubble_fraction(4, 1)
