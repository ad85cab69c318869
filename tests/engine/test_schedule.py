from gpipe_repro.engine.schedule import bubble_fraction, clock_table, render, stage_actions


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


def test_gpipe_picture():
    # F takes 1 unit, B takes 2: the paper's Fig. 2(c) for K=3, M=4.
    assert render("gpipe", 3, 4).splitlines() == [
        "stage 0: F0  F1  F2  F3    .   .   .   .   .   . B3  B3  B2  B2  B1  B1  B0  B0",
        "stage 1:   . F0  F1  F2  F3    .   .   . B3  B3  B2  B2  B1  B1  B0  B0    .   .",
        "stage 2:   .   . F0  F1  F2  F3  B3  B3  B2  B2  B1  B1  B0  B0    .   .   .   .",
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


def test_simulated_bubble_equals_formula_for_both_schedules():
    for name in ("gpipe", "1f1b"):
        for K, M in [(2, 1), (2, 4), (4, 8), (3, 5)]:
            table = clock_table(name, K, M)
            span = max(e for row in table for _, e, _ in row)
            busy = sum(e - s for row in table for s, e, _ in row)
            assert 1 - busy / (K * span) == __import__("pytest").approx(bubble_fraction(K, M))
