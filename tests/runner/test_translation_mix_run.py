"""A many->English run end to end: two fixture languages mixed into one stream through a K = 2 pipeline,
BLEU and NLL reported per language in metrics.json (eval.by_language) with their labels."""

import random

import pytest
from _shared import write_corpus

from gpipe_repro.config.compose import compose
from gpipe_repro.runner import run
from gpipe_repro.translate import bleu

WORDS = "the a house dog cat runs sleeps big small red green quickly today".split()

pytestmark = pytest.mark.slow


def reversals(lang: str, n_train: int, n_eval: int = 12) -> dict[str, list[tuple[str, str]]]:
    """Sentences of ``lang`` (its words prefixed) whose English is the words in reverse order."""
    rng = random.Random(lang)
    splits = {}
    for split, n in (("train", n_train), ("dev", n_eval), ("test", n_eval)):
        words = [[rng.choice(WORDS) for _ in range(rng.randint(3, 8))] for _ in range(n)]
        splits[split] = [(" ".join(f"{lang}{w}" for w in s), " ".join(reversed(s))) for s in words]
    return splits


def test_a_mix_trains_through_two_stages_and_reports_each_language(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path / "cache"))
    hi = write_corpus(tmp_path / "hi", "xx", reversals("xx", 200))
    lo = write_corpus(tmp_path / "lo", "yy", reversals("yy", 200))
    m = run(
        compose(
            [
                "model=transformer_mt",
                "model.L=1",
                "model.H=64",
                "model.A=2",
                "model.d=32",
                "data=translation",
                f"data.corpora=[{hi},{lo}]",
                "data.train_sizes=[null,20]",
                "data.temperature=5",
                "data.vocab_size=60",
                "data.max_len=24",
                "pipeline.K=2",
                "pipeline.M=2",
                "train.batch_size=256",
                "train.steps=3",
                "train.warmup_steps=1",
                "train.eval_limit=2",  # every decoded sentence is among the examples
                "train.progress=false",
                "logger=none",
                "optim=adam",
            ],
            cuda_available=False,
        ),
        tmp_path / "run",
    )
    assert m.status == "ok", m.error
    by = m.eval.by_language
    assert list(by) == ["xx", "yy"] and m.eval.samples == 4  # eval_limit sentences of each language
    assert by["xx"]["resource"] == "high" and by["yy"]["resource"] == "low"
    assert (
        by["yy"]["train_pairs"] == 20 and by["yy"]["copies"] > 1 and by["xx"]["synthetic"] is False
    )
    for lang, v in by.items():
        assert v["sentences"] == 2 and len(v["examples"]) == 2
        # each language's BLEU is over its own decoded sentences against its own references
        assert all(e["ref"].split()[0] in WORDS for e in v["examples"]), (lang, v["examples"])
        hyps, refs = [e["hyp"] for e in v["examples"]], [e["ref"] for e in v["examples"]]
        assert v["bleu"] == bleu(hyps, refs).score
    # the overall NLL is the per-language NLLs weighted by their target tokens
    tokens = sum(v["nll_tokens"] for v in by.values())
    assert m.eval.loss == pytest.approx(
        sum(v["nll"] * v["nll_tokens"] for v in by.values()) / tokens
    )
