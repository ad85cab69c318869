"""A small K = 1 save shared by the single-process save tests."""

from pathlib import Path
from typing import Any

import _save_ranks as r
import pytest


@pytest.fixture(scope="module")
def k1(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two RMSprop steps of the tuplenet at K = 1, saved: the save's folder and the state saved."""
    directory = tmp_path_factory.mktemp("saves")
    with r.one_thread():
        run = r.Run(1, [8], "rmsprop")
        run.train(0, 2)
        return {"path": run.save(str(directory), 2), "state": run.state()}


@pytest.fixture(scope="module")
def k1_save(k1: dict[str, Any]) -> Path:
    return k1["path"]
