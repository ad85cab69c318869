"""The launcher: a failing rank stops the run and its own message reaches the caller."""

import time

import _workers as w
import pytest

from gpipe_repro.engine import RankError, launch


@pytest.mark.slow
def test_a_failing_rank_stops_the_run_with_its_message():
    t0 = time.monotonic()
    with pytest.raises(RankError, match="boom from the test rank") as err:
        launch(w.failing, 2, (2, 1))
    assert err.value.rank == 1
    assert time.monotonic() - t0 < 60
