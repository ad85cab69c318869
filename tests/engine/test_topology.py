"""Who is who: ranks are replica-major, rank = replica * K + stage."""

import pytest
import torch

from gpipe_repro.engine import ArgumentError, Topology, init_topology


def test_replica_major_layout_and_neighbours():
    K, D = 4, 2
    topos = [Topology(K=K, replicas=D, rank=r, device=torch.device("cpu")) for r in range(K * D)]
    assert [(t.replica, t.stage) for t in topos] == [(d, k) for d in range(D) for k in range(K)]
    t = topos[5]  # replica 1, stage 1
    assert (t.prev_rank, t.next_rank, t.is_first, t.is_last) == (4, 6, False, False)
    assert topos[4].prev_rank is None and topos[7].next_rank is None and topos[7].is_last


def test_world_size_must_match(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ValueError, match=r"world size must equal K\*replicas: 3 != 2\*1"):
        init_topology(2)
    with pytest.raises(ArgumentError, match="^K=0 is invalid"):
        init_topology(0)
