"""The boundary handshake: shapes and dtypes of a tuple survive the fixed-size encoding."""

import pytest
import torch

from gpipe_repro.engine.comm import META_LEN, TensorMeta, _decode, _encode, describe


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
