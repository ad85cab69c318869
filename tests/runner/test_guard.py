"""The launch's guard: a failing rank's echo traced to the rank that froze; heartbeats cleared."""

from __future__ import annotations

import os
import time

import pytest

from gpipe_repro.engine import RankError
from gpipe_repro.rank import HEARTBEAT_DIR
from gpipe_repro.runner.guard import watched


def test_watched_passes_a_rank_error_on_when_nothing_explains_it(tmp_path):
    (tmp_path / HEARTBEAT_DIR).mkdir()
    (tmp_path / HEARTBEAT_DIR / "rank-0").write_text("0")  # a previous launch's
    err = RankError(1, "rank 1: its own line")
    with pytest.raises(RankError) as info, watched(tmp_path, 0, K=2):
        assert not (tmp_path / HEARTBEAT_DIR).exists()  # cleared before the launch
        raise err
    assert info.value is err
    assert not (tmp_path / HEARTBEAT_DIR).exists()


def test_watched_names_the_rank_that_froze_rather_than_its_neighbour(tmp_path):
    with pytest.raises(RankError) as info, watched(tmp_path, 0.5, K=2):
        beat = tmp_path / HEARTBEAT_DIR / "rank-3"
        beat.parent.mkdir()
        beat.write_text("0")  # no pid to kill
        os.utime(beat, (time.time() - 60, time.time() - 60))
        time.sleep(1.5)  # the watchdog looks once a second
        raise RankError(0, "rank 0: the connection was closed")
    assert info.value.rank == 3
    assert str(info.value).startswith("rank 3 (stage 1, replica 1) stopped responding")
    assert not (tmp_path / HEARTBEAT_DIR).exists()
