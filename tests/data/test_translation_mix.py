"""Many->English mixes (data.corpora): temperature copies, per-language dev/test rows, synthetic labels
kept, deterministic and resumable batches, per-language BLEU/NLL, and the config's one-line mistakes."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch
from _shared import write_corpus

from gpipe_repro.config.compose import compose
from gpipe_repro.data import build_dataset
from gpipe_repro.data.translation import TranslationDataset, build_vocab
from gpipe_repro.data.translation.corpus import Corpus
from gpipe_repro.data.translation.mix import copies_for, load_mix, mix_corpora, resource_of
from gpipe_repro.errors import UserError
from gpipe_repro.models.transformer import transformer_mt_layers
from gpipe_repro.translate import bleu, evaluate_translation, nll_per_token, translate_ids

WORDS = {
    "es": "casa perro gato sol luna agua".split(),
    "ca": "casa gos gat sol lluna aigua".split(),
    "gl": "casa can gato sol lua auga".split(),
}
ENGLISH = "house dog cat sun moon water".split()


def corpus(
    src: str, n_train: int, n_eval: int = 12, seed: int = 0, synthetic: bool = False
) -> Corpus:
    rng = random.Random(f"{src}{seed}")

    def pair() -> tuple[str, str]:
        idx = [rng.randrange(6) for _ in range(rng.randint(2, 6))]
        return " ".join(WORDS[src][i] for i in idx) + f" {src} .", " ".join(
            ENGLISH[i] for i in idx
        ) + " ."

    return Corpus(
        f"{src}-en{'-synthetic' if synthetic else ''}",
        src,
        "en",
        [pair() for _ in range(n_train)],
        [pair() for _ in range(n_eval)],
        [pair() for _ in range(n_eval + 1)],
        synthetic=synthetic,
        note=f"fixture {src}",
        key=f"fixture-{src}",
    )


def write_root(path, c: Corpus) -> str:
    return write_corpus(path, c.src, {split: c.split(split) for split in ("train", "dev", "test")})


def test_temperature_copies_make_shares_proportional_to_size_to_the_one_over_t():
    assert copies_for([1000, 100, 10], 1.0) == [1, 1, 1]  # T = 1: as the data come
    sizes = [20_000, 2_000, 500]
    for T in (2.0, 5.0):
        copies = copies_for(sizes, T)
        shares = [c * n for c, n in zip(copies, sizes)]
        want = [n ** (1 / T) for n in sizes]
        for s, w in zip(shares, want):  # within the rounding of whole copies
            assert s / shares[0] == pytest.approx(w / want[0], rel=0.2)
        assert copies[0] == 1 and copies[1] < copies[2]
    assert resource_of(2_000, 20_000) == "low" and resource_of(6_000, 20_000) == "high"
    with pytest.raises(UserError, match="temperature=0.5 is invalid"):
        copies_for(sizes, 0.5)


def test_mix_keeps_each_languages_rows_and_labels():
    es, ca, gl = corpus("es", 200), corpus("ca", 20, synthetic=True), corpus("gl", 30, n_eval=7)
    mix = mix_corpora([es, ca, gl], temperature=5.0)
    copies = copies_for([200, 20, 30], 5.0)
    assert [p.src for p in mix.parts] == ["es", "ca", "gl"] and mix.synthetic
    assert [p.synthetic for p in mix.parts] == [False, True, False]
    assert [p.resource for p in mix.parts] == ["high", "low", "low"]
    assert [p.copies for p in mix.parts] == copies and [p.train_pairs for p in mix.parts] == [
        200,
        20,
        30,
    ]
    assert len(mix.train) == sum(c * n for c, n in zip(copies, [200, 20, 30]))
    for part, c in zip(mix.parts, (es, ca, gl)):
        for split in ("dev", "test"):
            assert [mix.split(split)[i] for i in part.rows(split)] == c.split(split)
        assert sum(p == c.train[0] for p in mix.train) >= part.copies  # its pairs, repeated
    described = mix.describe()["languages"]
    assert [d["synthetic"] for d in described] == [
        False,
        True,
        False,
    ] and "fixture ca" in described[1]["note"]


def test_mix_refuses_two_corpora_of_one_language_and_two_targets():
    with pytest.raises(UserError, match="source language es more than once"):
        mix_corpora([corpus("es", 10), replace(corpus("es", 10), name="es-en-synthetic")])
    with pytest.raises(UserError, match="one target language"):
        mix_corpora([corpus("es", 10), replace(corpus("ca", 10), tgt="de")])
    with pytest.raises(UserError, match="train_sizes=\\[5\\] has 1 entries but corpora has 2"):
        load_mix(["es-en", "de-en"], [5])


@pytest.fixture
def roots(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path / "cache"))
    return [write_root(tmp_path / src, corpus(src, n)) for src, n in (("es", 300), ("ca", 60))]


def test_train_offsets_take_disjoint_slices_of_each_corpus(roots):
    full = [load_mix([r]).train for r in roots]
    mixed = load_mix(roots, [20, 15], train_offsets=[0, 30])
    es, ca = mixed.parts
    assert (es.train_pairs, ca.train_pairs) == (20, 15)
    assert mixed.train == full[0][:20] + full[1][30:45]  # temperature 1: one copy each
    with pytest.raises(UserError, match=r"train_offset=300 is invalid for 300 training pairs"):
        load_mix(roots, train_offsets=[300, 0])
    with pytest.raises(UserError, match=r"train_offsets=\[0\] has 1 entries but corpora has 2"):
        load_mix(roots, train_offsets=[0])


def test_mixed_batches_are_deterministic_resumable_and_hold_both_languages(roots):
    opts = {
        "corpora": roots,
        "train_sizes": [None, 40],
        "temperature": 5.0,
        "vocab_size": 60,
        "max_len": 32,
    }
    a, b = build_dataset("translation", opts), build_dataset("translation", opts)
    assert [p.train_pairs for p in a.corpus.parts] == [
        300,
        40,
    ]  # the subset of the low-resource one
    first = [y for _, y in zip(range(12), a.batches(0, 128, seed=3, multiple_of=2))]
    again = [y for _, y in zip(range(12), b.batches(0, 128, seed=3, multiple_of=2))]
    resumed = [y for _, y in zip(range(5), b.batches(7, 128, seed=3, multiple_of=2))]
    for (x1, y1), (x2, y2) in zip(first, again):
        assert torch.equal(x1[0], x2[0]) and torch.equal(y1[0], y2[0])
    for (x1, y1), (x2, y2) in zip(first[7:], resumed):
        assert torch.equal(x1[0], x2[0]) and torch.equal(y1[0], y2[0])
    ca_tag = a.vocab.encode(["ca"])[0][-1]
    seen = torch.cat([x[0].flatten() for x, _ in first])
    assert (seen == ca_tag).any()  # Catalan sentences are in the stream


def test_per_language_evaluation_scores_each_language_on_its_own_test_rows(roots):
    data = build_dataset("translation", {"corpora": roots, "vocab_size": 60, "max_len": 32})
    assert isinstance(data, TranslationDataset)
    torch.manual_seed(0)
    layers = transformer_mt_layers(1, 32, 1, d=16, V=data.info.classes)
    res = evaluate_translation(layers, data, "test", limit=5)
    by = res["by_language"]
    assert list(by) == ["es", "ca"] and res["bleu_sentences"] == 10
    sources, refs = data.source_ids("test"), data.references("test")
    total_nll, total_tokens = 0.0, 0
    for part in data.corpus.parts:
        rows = list(part.rows("test"))[:5]
        hyps = data.vocab.decode(translate_ids(layers, [sources[i] for i in rows]))
        assert by[part.src]["bleu"] == pytest.approx(bleu(hyps, [refs[i] for i in rows]).score)
        nll, tokens = nll_per_token(layers, data, "test", rows=part.rows("test"))
        assert by[part.src]["nll"] == pytest.approx(nll) and by[part.src]["sentences"] == 5
        assert by[part.src]["resource"] == part.resource and by[part.src]["synthetic"] is False
        total_nll, total_tokens = total_nll + nll * tokens, total_tokens + tokens
    assert res["nll"] == pytest.approx(total_nll / total_tokens)
    whole, _ = nll_per_token(layers, data, "test")
    assert res["nll"] == pytest.approx(whole, rel=1e-5)  # the languages' rows cover the split


def test_a_learning_curve_point_scores_the_first_sentences_of_each_language(roots):
    data = build_dataset("translation", {"corpora": roots, "vocab_size": 60, "max_len": 32})
    torch.manual_seed(0)
    layers = transformer_mt_layers(1, 32, 1, d=16, V=data.info.classes)
    res = evaluate_translation(layers, data, "dev", limit=3, nll_limit=4)
    for part in data.corpus.parts:
        nll, _ = nll_per_token(layers, data, "dev", rows=list(part.rows("dev"))[:4])
        assert res["by_language"][part.src]["nll"] == pytest.approx(nll)
    whole = evaluate_translation(layers, data, "dev", limit=3)["by_language"]
    assert whole["es"]["nll"] != pytest.approx(res["by_language"]["es"]["nll"])  # a subset


def test_synthetic_labels_reach_the_per_language_results(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path))
    mix = mix_corpora([corpus("es", 80), corpus("gl", 15, synthetic=True)], temperature=2.0)
    data = TranslationDataset(mix, build_vocab(mix, 60), max_len=32)
    layers = transformer_mt_layers(1, 32, 1, d=16, V=data.info.classes)
    by = evaluate_translation(layers, data, "dev", limit=2)["by_language"]
    assert by["gl"]["synthetic"] is True and by["es"]["synthetic"] is False
    assert by["gl"]["corpus"] == "gl-en-synthetic" and by["gl"]["resource"] == "low"


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["data.corpora=[es-en,xx-en]"], "data.corpora entry 'xx-en' is unknown; allowed: "),
        (
            ["data.corpora=[es-en,de-en]", "data.train_sizes=[5]"],
            "data.train_sizes=[5] is invalid for 2 corpora",
        ),
        (["data.train_sizes=[5]"], "data.train_sizes=[5] needs data.corpora"),
        (["data.train_offsets=[5]"], "data.train_offsets=[5] needs data.corpora"),
        (
            ["data.corpora=[es-en,de-en]", "data.train_offsets=[0,-3]"],
            "data.train_offsets=[0, -3] is invalid for 2 corpora; allowed: one integer >= 0",
        ),
        (
            ["data.corpora=[es-en]", "data.train_size=5"],
            "data.corpora excludes data.root and data.train_size",
        ),
        (["data.corpora=[/nonexistent/corpus]"], "root=/nonexistent/corpus is not a directory"),
    ],
)
def test_mix_mistakes_are_one_line_before_anything_loads(overrides, message):
    with pytest.raises(UserError) as err:
        compose(["model=transformer_mt", "data=translation", *overrides], cuda_available=False)
    assert message in str(err.value) and "\n" not in str(err.value)
