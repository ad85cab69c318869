"""The boundary handshake: shapes, dtypes and aliases of a tuple survive the fixed-size encoding,
and a tensor that appears twice in a tuple crosses once and comes back bit-exact."""

import _model_workers as mw
import pytest
import torch

from gpipe_repro.engine import launch
from gpipe_repro.engine.comm import (
    META_LEN,
    TensorMeta,
    _decode,
    _encode,
    describe,
    rebuild,
    wire,
)


def test_meta_round_trip_for_a_tuple_of_mixed_dtypes():
    ts = (
        torch.zeros(4, 3, 8, 8),
        torch.zeros(4, 16, dtype=torch.long),
        torch.zeros(2, dtype=torch.bool),
    )
    metas = describe(ts)
    enc = _encode(metas, True)
    assert enc.shape == (META_LEN,) and enc.dtype == torch.int64
    back, is_tuple = _decode(enc)
    assert is_tuple and back == metas
    assert [m.is_float for m in back] == [True, False, False]


def test_too_many_dimensions_is_refused():
    with pytest.raises(ValueError, match="too large to describe"):
        _encode([TensorMeta(tuple([1] * 40), torch.float32)] * 2, True)


def test_the_same_tensor_twice_crosses_once_and_is_rebuilt_as_one():
    h, other = torch.randn(2, 3), torch.randn(2, 3)
    pair = (h, other, h)
    assert [m.alias for m in describe(pair)] == [-1, -1, -1]  # shapes only, unless asked
    metas = describe(pair, aliases=True)
    assert [m.alias for m in metas] == [-1, -1, 0]
    assert [m.crosses for m in metas] == [True, True, False]
    back, is_tuple = _decode(_encode(metas, True))
    assert is_tuple and back == metas
    assert wire(pair, metas) == [h, other]
    got = rebuild([h.clone(), other.clone()], back, True)
    assert got[0] is got[2] and got[0] is not got[1] and torch.equal(got[2], h)
    assert [m.alias for m in describe((h, h.clone()), aliases=True)] == [
        -1,
        -1,
    ]  # equal values, two tensors


def test_a_stem_pair_across_a_boundary_updates_bit_for_bit_as_one_process():
    """tuplenet's stem returns (h, h); at K = 2 with balance [1, 7] the pair crosses from stage 0.
    Both of h's uses accumulate into one gradient in autograd's own order on stage 1, as in one
    process, so the update is bit-identical (it agreed only to rounding when h crossed as two
    tensors, summed on stage 0). The slow model grid (``test_rng``) crosses AmoebaNet's at K = 4."""
    runs = [dict(model="tuplenet", schedule=s, checkpoint="except_last") for s in ("gpipe", "1f1b")]
    one = mw.here(runs)
    two = launch(mw.grid, 2, (2, runs), threads=1)
    for i, cfg in enumerate(runs):
        want = one[i]
        got = {**two[0][i]["state"], **two[1][i]["state"]}
        assert two[1][i]["losses"] == want["losses"], cfg
        assert got.keys() == want["state"].keys()
        for k, v in want["state"].items():
            assert torch.equal(got[k], v), (cfg, k, (got[k] - v).abs().max())
