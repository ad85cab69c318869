"""The transfer recipe's transforms: flip mirrors, cutout zeroes a clipped square centred anywhere,
p=0 does nothing, evaluation is unaugmented, draws depend only on (seed, epoch, index)."""

from __future__ import annotations

import torch

from gpipe_repro.data.augment import (
    Cutout,
    apply_seeded,
    channel_stats,
    derive_seed,
    eval_transform,
    train_transform,
)


def _image(h: int = 10, w: int = 10, c: int = 1) -> torch.Tensor:
    return torch.randint(
        1, 256, (c, h, w), generator=torch.Generator().manual_seed(3), dtype=torch.uint8
    )


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=0, atol=1e-6)  # ToDtype scales by a float reciprocal of 255


def _zero_box(out: torch.Tensor) -> tuple[int, int, int, int]:
    rows = torch.nonzero((out == 0).all(0).any(1)).flatten()
    cols = torch.nonzero((out == 0).all(0).any(0)).flatten()
    return int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1


def test_flip_mirrors_exactly_and_only_sometimes():
    x = _image()
    tf = train_transform(12, mean=[0.0], std=[1.0], flip=True, cutout=0, native=None)
    plain = x.float() / 255
    tf_nat = train_transform(10, mean=[0.0], std=[1.0], flip=True, cutout=0, native=(10, 10))
    outs = [apply_seeded(tf_nat, x, derive_seed(0, 0, i)) for i in range(40)]
    flipped = sum(_close(o, plain.flip(-1)) for o in outs)
    same = sum(_close(o, plain) for o in outs)
    assert flipped + same == 40 and 5 < flipped < 35
    assert tuple(apply_seeded(tf, x, 0).shape) == (1, 12, 12)  # native differs: resized


def test_no_flip_when_switched_off():
    x = _image()
    tf = train_transform(10, mean=[0.0], std=[1.0], flip=False, cutout=0, native=(10, 10))
    assert all(_close(apply_seeded(tf, x, s), x.float() / 255) for s in range(20))


def test_cutout_zeroes_a_square_of_the_right_size_clipped_at_the_border():
    x = torch.ones(2, 16, 16)
    cut, unclipped, clipped = Cutout(5), 0, 0
    for s in range(300):
        out = apply_seeded(cut, x, s)
        y0, y1, x0, x1 = _zero_box(out)
        box = torch.zeros(16, 16, dtype=torch.bool)
        box[y0:y1, x0:x1] = True
        assert torch.equal((out == 0).all(0), box)  # exactly one rectangle, every channel
        assert torch.equal(out[:, ~box], x[:, ~box])  # nothing else touched
        for lo, hi in ((y0, y1), (x0, x1)):
            assert hi - lo <= 5
            if lo > 0 and hi < 16:
                assert hi - lo == 5  # inside: the full side
            else:
                assert hi - lo >= 3  # centre inside the image: at least size // 2 + 1 remain
        inside = y0 > 0 and y1 < 16 and x0 > 0 and x1 < 16
        unclipped += inside
        clipped += not inside
    assert unclipped > 0 and clipped > 0


def test_cutout_centre_is_any_pixel_corners_included():
    x = torch.ones(1, 4, 4)
    hits = torch.zeros(4, 4)
    for s in range(800):
        hits += (apply_seeded(Cutout(1), x, s) == 0)[0].float()
    assert hits.sum() == 800  # size 1: exactly the centre pixel
    assert hits.min() > 20 and hits.max() < 80  # uniform over 16 pixels: 50 expected each


def test_cutout_even_size_has_centre_at_offset_half():
    # size 4: rows centre-2 .. centre+1. Centre row 0 or 1 leaves 2 or 3 rows at the top; centre row 8
    # leaves 3 at the bottom (row 7 still fits all 4).
    x = torch.ones(1, 9, 9)
    top, bottom = set(), set()
    for s in range(400):
        y0, y1, _, _ = _zero_box(apply_seeded(Cutout(4), x, s))
        if y0 == 0:
            top.add(y1 - y0)
        elif y1 == 9:
            bottom.add(y1 - y0)
        else:
            assert y1 - y0 == 4
    assert top == {2, 3, 4} and bottom == {3, 4}


def test_p_zero_does_nothing():
    x = _image().float()
    assert all(torch.equal(apply_seeded(Cutout(6, p=0.0), x, s), x) for s in range(30))
    tf = train_transform(10, mean=[0.0], std=[1.0], flip=False, cutout=6, native=(10, 10))
    tf.transforms[-1].p = 0.0
    assert _close(apply_seeded(tf, _image(), 1), _image().float() / 255)


def test_draws_depend_on_seed_epoch_index_only_and_leave_global_rng_alone():
    x = _image(28, 28)
    tf = train_transform(28, mean=[0.5], std=[0.25], flip=True, cutout=8, native=(28, 28))
    before = torch.get_rng_state()
    a = apply_seeded(tf, x, derive_seed(7, 2, 11))
    torch.rand(5)  # unrelated draws in between change nothing
    b = apply_seeded(tf, x, derive_seed(7, 2, 11))
    assert torch.equal(a, b)
    others = [apply_seeded(tf, x, derive_seed(*k)) for k in ((8, 2, 11), (7, 3, 11), (7, 2, 12))]
    assert sum(torch.equal(a, o) for o in others) < 3  # a different key draws differently
    rng = torch.get_rng_state()
    apply_seeded(tf, x, 123)
    assert torch.equal(torch.get_rng_state(), rng) and not torch.equal(rng, before)


def test_derive_seed_separates_keys():
    seeds = {derive_seed(s, e, i) for s in range(3) for e in range(3) for i in range(50)}
    assert len(seeds) == 450 and all(0 <= v < 2**63 for v in seeds)
    assert derive_seed(1, 2) != derive_seed(1, 2, 0)


def test_eval_is_resize_and_normalise_only():
    x = _image(8, 8)
    ev = eval_transform(16, mean=[0.5], std=[0.25], native=(8, 8))
    out = [ev(x).as_subclass(torch.Tensor) for _ in range(3)]
    assert tuple(out[0].shape) == (1, 16, 16)
    assert torch.equal(out[0], out[1]) and torch.equal(out[1], out[2])
    same = eval_transform(8, mean=[0.5], std=[0.25], native=(8, 8))(x)
    assert torch.allclose(same, (x.float() / 255 - 0.5) / 0.25)


def test_channel_stats_match_float_computation():
    x = torch.randint(0, 256, (20, 3, 5, 5), dtype=torch.uint8)
    mean, std = channel_stats(x)
    f = x.double() / 255
    assert torch.allclose(torch.tensor(mean, dtype=torch.float64), f.mean((0, 2, 3)))
    assert torch.allclose(torch.tensor(std, dtype=torch.float64), f.std((0, 2, 3), unbiased=False))
