"""BLEU is sacrebleu's with its signature; the NLL per token is the teacher-forced mean over real tokens."""

import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from gpipe_repro.data.translation import BOS, EOS, TranslationDataset, build_vocab
from gpipe_repro.data.translation.corpus import Corpus
from gpipe_repro.models.transformer import transformer_mt_layers
from gpipe_repro.translate import bleu, evaluate_translation, nll_per_token, translate_ids

HYPS = ["The cat sat on the mat.", "He went home by train yesterday.", "It is getting dark now."]
REFS = ["The cat sat on a mat.", "He went home by train.", "It's getting dark."]


def test_bleu_is_sacrebleus_corpus_bleu_with_its_signature():
    got = bleu(HYPS, REFS)
    want = sacrebleu.corpus_bleu(HYPS, [REFS])
    assert got.score == pytest.approx(want.score, abs=1e-9) and 0 < got.score < 100
    metric = sacrebleu.metrics.BLEU()
    metric.corpus_score(HYPS, [REFS])
    assert got.signature == str(metric.get_signature()) and "tok:13a" in got.signature
    assert bleu(REFS, REFS).score == pytest.approx(100.0)
    with pytest.raises(ValueError, match="2 hypotheses for 3 references"):
        bleu(HYPS[:2], REFS)


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("GPIPE_DATA_CACHE", str(tmp_path))
    pairs = [
        (f"uno dos {'tres ' * (i % 5)}fin .", f"one two {'three ' * (i % 5)}end .")
        for i in range(60)
    ]
    corpus = Corpus(
        "tiny", "es", "en", pairs[:40], pairs[40:50], pairs[50:], synthetic=True, key="tiny"
    )
    data = TranslationDataset(corpus, build_vocab(corpus, 40), max_len=32)
    torch.manual_seed(0)
    return data, transformer_mt_layers(1, 32, 1, d=16, V=data.info.classes)


def test_nll_per_token_is_the_mean_over_every_real_target_token(tiny):
    data, layers = tiny
    nll, tokens = nll_per_token(layers, data, "dev", batch_tokens=40)  # several batches
    want_sum, want_tokens = 0.0, 0
    model = torch.nn.Sequential(*layers)
    for src, tgt in zip(data.source_ids("dev"), data.vocab.encode(data.references("dev"))):
        with torch.no_grad():
            out = model((torch.tensor([[*src, EOS]]), torch.tensor([[BOS, *tgt]])))
        y = torch.tensor([*tgt, EOS])
        want_sum += F.cross_entropy(out[0], y, reduction="sum").item()
        want_tokens += len(y)
    # each sentence alone above (no padding), batched with padding in nll_per_token
    assert tokens == want_tokens and tokens > 0
    assert nll == pytest.approx(want_sum / want_tokens, rel=1e-5)


def test_evaluation_reports_bleu_signature_nll_and_the_synthetic_label(tiny):
    data, layers = tiny
    res = evaluate_translation(layers, data, "test", limit=4)
    assert res["bleu_sentences"] == 4 and res["synthetic"] is True and res["split"] == "test"
    assert res["bleu_signature"].startswith("nrefs:1|") and res["nll"] > 0
    hyps = data.vocab.decode(translate_ids(layers, data.source_ids("test")[:4]))
    assert res["bleu"] == pytest.approx(bleu(hyps, data.references("test")[:4]).score)
    assert [e["hyp"] for e in res["examples"]] == hyps[:3]
