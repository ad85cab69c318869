from gpipe_repro.sim.render import render

# Forward takes 1 unit, backward 2; one column per unit, '.' is idle (the paper's Fig. 2c).
GPIPE_3_4 = """\
stage 0: F0  F1  F2  F3    .   .   .   .   .   . B3  B3  B2  B2  B1  B1  B0  B0
stage 1:   . F0  F1  F2  F3    .   .   . B3  B3  B2  B2  B1  B1  B0  B0    .   .
stage 2:   .   . F0  F1  F2  F3  B3  B3  B2  B2  B1  B1  B0  B0    .   .   .   ."""

# 1F1B (PipeDream-flush): K-k-1 warm-up forwards, then one forward, one backward; same length.
ONE_F_ONE_B_3_4 = """\
stage 0: F0  F1  F2    .   .   .   . B0  B0  F3  B1  B1    . B2  B2    . B3  B3
stage 1:   . F0  F1    .   . B0  B0  F2  B1  B1  F3  B2  B2    . B3  B3    .   .
stage 2:   .   . F0  B0  B0  F1  B1  B1  F2  B2  B2  F3  B3  B3    .   .   .   ."""


def test_gpipe_picture():
    assert render("gpipe", 3, 4) == GPIPE_3_4


def test_1f1b_picture():
    assert render("1f1b", 3, 4) == ONE_F_ONE_B_3_4


def test_stage_0_ends_after_the_fill_drain_length():
    # Stage 0 runs the step's last backward (B0 in gpipe, B(M-1) in 1f1b), ending at
    # (M + K - 1) * (F + B) units for both schedules.
    for name in ("gpipe", "1f1b"):
        for K, M in [(1, 3), (2, 2), (4, 3), (5, 8)]:
            row = render(name, K, M).splitlines()[0].removeprefix("stage 0: ")
            last = "B0" if name == "gpipe" else f"B{M - 1}"
            assert row.endswith(f"{last:<4}{last}")
            # 4 characters per unit; the last cell loses its 2 trailing spaces
            assert len(row) == 4 * (M + K - 1) * 3 - 2
