"""The shared SentencePiece vocabulary and token-count mini-batches from length buckets: shapes,
budgets, BOS-shifted targets, token counts, determinism, resumption, epochs and evaluation batches."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from _shared import write_corpus

from gpipe_repro.data.translation import BOS, EOS, PAD, UNK, TranslationDataset, build_vocab, vocab
from gpipe_repro.data.translation.corpus import Corpus
from gpipe_repro.errors import UserError

WORDS = (
    "casa perro gato sol luna agua fuego tierra cielo mar rio monte libro mesa silla puerta".split()
)


def fixture_corpus(n_train: int = 600, seed: int = 0) -> Corpus:
    rng = random.Random(seed)

    def pair(max_words: int) -> tuple[str, str]:
        words = rng.choices(WORDS, k=rng.randint(1, max_words))
        return " ".join(words) + " .", " ".join(w.upper() for w in reversed(words)) + " ."

    train = dict(pair(rng.choice([4, 12, 30])) for _ in range(n_train))  # unique sources
    return Corpus(
        "fixture",
        "es",
        "en",
        train=list(train.items()),
        dev=[pair(12) for _ in range(40)],
        test=[pair(12) for _ in range(40)],
        key="fixture",
    )


@pytest.fixture
def data(tmp_path, monkeypatch) -> TranslationDataset:
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path))
    corpus = fixture_corpus()
    return TranslationDataset(corpus, build_vocab(corpus, 120), max_len=48, bucket_width=8)


def test_vocab_special_ids_round_trip_and_cache(tmp_path, monkeypatch, data):
    v = data.vocab
    assert (v.sp.pad_id(), v.sp.unk_id(), v.sp.bos_id(), v.sp.eos_id()) == (PAD, UNK, BOS, EOS)
    text = data.corpus.dev[0][1]
    ids = v.encode([text])[0]
    assert min(ids) > EOS and v.decode([[BOS, *ids, EOS, 7, 7]]) == [text]  # stops at EOS
    assert v.path is not None and v.path.parent == tmp_path / "translation" / "fixture"

    def no_training(*_):
        raise AssertionError("trained again instead of reading the cache")

    monkeypatch.setattr(vocab, "_train", no_training)
    again = build_vocab(data.corpus, 120)
    assert again.path == v.path and again.encode([text]) == [ids]
    other = Corpus(
        "fixture",
        "es",
        "en",
        data.corpus.train[:300],
        data.corpus.dev,
        data.corpus.test,
        key="fixture",
    )
    with pytest.raises(AssertionError, match="trained again"):  # another training text, another key
        build_vocab(other, 120)


def check_batch(data, inputs, targets, batch_size, multiple_of, shapes):
    (src, tgt_in), (tgt, count) = inputs, targets
    n, L = src.shape
    assert tgt_in.shape == tgt.shape == (n, L) and count.shape == (n,)
    assert (n, L) in shapes and n % multiple_of == 0
    assert n * L <= batch_size or n == multiple_of
    assert (tgt_in[:, 0] == BOS).all()
    real = tgt != PAD
    assert torch.equal(tgt_in[:, 1:][real[:, :-1]], tgt[:, :-1][real[:, :-1]])  # shifted by one
    assert (count == int(real.sum())).all() and ((tgt == EOS).sum(1) == 1).all()
    assert ((src == EOS).sum(1) == 1).all() and (src[:, 0] != PAD).all()


@pytest.mark.parametrize("batch_size,multiple_of", [(256, 1), (512, 4), (100, 8)])
def test_batches_fill_a_token_budget_with_bucketed_shapes(data, batch_size, multiple_of):
    buckets = data.buckets(batch_size, multiple_of)
    shapes = {(n, L) for L, n, _ in buckets}
    assert all(L % data.width == 0 or L == data.max_len for _, L in shapes)
    it = data.batches(0, batch_size, seed=3, multiple_of=multiple_of)
    seen = set()
    for _ in range(3 * data.batches_per_epoch(batch_size, multiple_of)):
        inputs, targets = next(it)
        check_batch(data, inputs, targets, batch_size, multiple_of, shapes)
        seen.add(tuple(inputs[0].shape))
    assert len(seen) > 1  # shapes really vary from step to step


def test_batches_depend_only_on_seed_and_step_and_resume_anywhere(data):
    def take(start, k, seed=5, d=data):
        it = d.batches(start, 256, seed, multiple_of=2)
        return [next(it) for _ in range(k)]

    per_epoch = data.batches_per_epoch(256, 2)
    run = take(0, per_epoch + 3)
    resumed = take(per_epoch - 2, 5)  # across an epoch boundary
    twin = TranslationDataset(data.corpus, data.vocab, max_len=48, bucket_width=8)
    for a, b in [*zip(run[per_epoch - 2 :], resumed), *zip(run, take(0, per_epoch + 3, d=twin))]:
        assert torch.equal(a[0][0], b[0][0]) and torch.equal(a[1][0], b[1][0])
    other_seed = take(0, 3, seed=6)
    assert any(not torch.equal(a[0][0], b[0][0]) for a, b in zip(run, other_seed))
    assert next(data.batches(4, 256, 5, multiple_of=2, need_inputs=False))[0] is None


def test_an_epoch_serves_each_pair_at_most_once_and_nearly_all(data):
    batch_size, per_epoch = 256, data.batches_per_epoch(256)
    rows = Counter()
    src_ids = data.source_ids("train")
    index = {tuple(s): i for i, s in enumerate(src_ids)}
    it = data.batches(per_epoch, batch_size, seed=1)  # epoch 1
    for _ in range(per_epoch):
        (src, _), _ = next(it)
        for row in src.tolist():
            rows[index[tuple(row[: row.index(EOS)])]] += 1
    usable = sum(1 for n in data._lengths if n <= data.max_len)
    longest = max(L for L, _, _ in data.buckets(batch_size))
    repeats = [i for i, c in rows.items() if c > 1 and data._lengths[i] > longest - data.width]
    assert all(c == 1 for i, c in rows.items() if i not in repeats)
    assert len(rows) >= 0.7 * usable  # mini-batch remainders wait for the next epoch's shuffle


def test_eval_pairs_cover_a_split_once_within_the_token_budget(data):
    seen = []
    for rows, ((src, _), (tgt, count)) in data.eval_pairs("dev", batch_tokens=64):
        assert src.numel() <= 64 or len(rows) == 1
        assert int(count[0]) == int((tgt != PAD).sum())
        seen += rows
    assert sorted(seen) == list(range(len(data.corpus.dev)))


def test_bad_arguments_are_one_line(data):
    with pytest.raises(UserError, match=r"batch_size=0, multiple_of=1 are invalid"):
        next(data.batches(0, 0, 0))
    with pytest.raises(UserError, match=r"split='valid' is unknown; allowed: train, dev, test"):
        data.source_ids("valid")
    with pytest.raises(UserError, match=r"max_len=2 leaves no training pair of fixture"):
        TranslationDataset(data.corpus, data.vocab, max_len=2)


def test_data_option_builds_from_a_root_and_announces_its_shapes(tmp_path, monkeypatch):
    from gpipe_repro.data import build_dataset
    from gpipe_repro.data.translation import TranslationConfig

    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path / "cache"))
    corpus = fixture_corpus(200)
    root = tmp_path / "corpus"
    write_corpus(root, "es", {split: corpus.split(split) for split in ("train", "dev", "test")})
    options = {"root": str(root), "vocab_size": 500, "max_len": 40}
    data = build_dataset("translation", options)
    assert data.vocab.size < 500  # a tiny corpus: fewer pieces than asked for ...
    assert data.info == TranslationConfig(**options).info()  # ... the model still gets the asked V
    assert data.corpus.src == "es" and len(data.corpus.train) == len(corpus.train)
    with pytest.raises(UserError, match="data.corpus"):
        build_dataset("translation", {"corpus": "xx-en"})
