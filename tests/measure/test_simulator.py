"""The simulator's validation's own arithmetic: how far the rounds of a cell lie apart."""

from __future__ import annotations

import pytest

from gpipe_repro.measure.simulator import _spread


def test_the_rounds_spread_is_the_farthest_round_median_from_the_cells():
    assert _spread([[1.0, 1.0]]) is None  # one round: nothing to compare
    # all steps' median 1.1; the rounds' medians 1.0 and 1.2: both 1/11 away
    assert _spread([[1.0, 1.0], [1.2, 1.2]]) == pytest.approx(0.1 / 1.1)
    assert _spread([[1.0, 1.0], [1.0, 1.0], [1.6, 1.6]]) == pytest.approx(0.6)
