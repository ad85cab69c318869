"""A translation run end to end: real text from a root, K = 2, per-token loss, BLEU from the gathered model."""

import random

import pytest
from _shared import write_corpus

from gpipe_repro.config.compose import compose
from gpipe_repro.runner import run

WORDS = "the a house dog cat runs sleeps big small red green quickly today".split()


def corpus(root, n_train=200, n_eval=20):
    rng = random.Random(0)
    splits = {}
    for split, n in (("train", n_train), ("dev", n_eval), ("test", n_eval)):
        words = [[rng.choice(WORDS) for _ in range(rng.randint(3, 9))] for _ in range(n)]
        splits[split] = [(" ".join(s), " ".join(reversed(s))) for s in words]
    write_corpus(root, "xx", splits)


@pytest.mark.slow
def test_translation_through_two_stages_reports_bleu_and_real_token_throughput(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "corpus"
    root.mkdir()
    corpus(root)
    m = run(
        compose(
            [
                "model=transformer_mt",
                "model.L=1",
                "model.H=64",
                "model.A=2",
                "model.d=32",
                "data=translation",
                f"data.root={root}",
                "data.vocab_size=40",
                "data.max_len=24",
                "pipeline.K=2",
                "pipeline.M=2",
                "train.batch_size=256",
                "train.steps=4",
                "train.warmup_steps=1",
                "train.progress=false",
                "logger=none",
                "optim=adam",
            ],
            cuda_available=False,
        ),
        tmp_path / "run",
    )
    assert m.status == "ok", m.error
    assert m.eval is not None and m.eval.samples == 20 and m.eval.bleu is not None
    assert m.eval.bleu_signature and "nrefs:1" in m.eval.bleu_signature
    assert m.eval.loss is not None and m.eval.loss > 0  # NLL per target token
    # batches are built by target tokens (~256 per step), not batch_size x max_len
    assert m.tokens_per_s is not None and m.tokens_per_s < 256 * m.throughput
