from gpipe_repro.engine.schedule import bubble_fraction, stage_actions


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
    def max_alive(name, K, M, k):
        alive = peak = 0
        for a in stage_actions(name, K, M, k):
            alive += 1 if a.kind == "F" else -1
            peak = max(peak, alive)
        return peak

    assert max_alive("gpipe", 4, 8, 0) == 8
    assert [max_alive("1f1b", 4, 8, k) for k in range(4)] == [4, 3, 2, 1]


def test_bubble_formula():
    # GPipe §2.3: (K-1)/(M+K-1); no bubble with one stage, and it shrinks as M grows.
    assert bubble_fraction(1, 8) == 0.0
    assert bubble_fraction(4, 1) == 3 / 4
    assert bubble_fraction(4, 32) < bubble_fraction(4, 4) < bubble_fraction(4, 1)
