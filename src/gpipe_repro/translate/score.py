"""Translation quality: BLEU with sacrebleu, and the NLL per target token (paper Table 5's two rows).

BLEU is computed by ``sacrebleu`` on detokenised text (SentencePiece decoded) against one reference
per sentence, with its default 13a tokenisation; the score travels with sacrebleu's signature
(``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...``), so numbers from different runs can be
compared only where signatures agree. Our BLEU is not comparable with the paper's: other data, other
test sets. The NLL is summed over every real target token (EOS included, padding excluded) and
divided by their number: the same quantity ``token_loss`` trains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..data.translation.batches import TranslationDataset
from ..data.translation.vocab import PAD
from ..errors import UserError
from .decode import split_layers, translate_ids

__all__ = ["Bleu", "bleu", "nll_per_token", "evaluate_translation"]


@dataclass(frozen=True)
class Bleu:
    score: float  # 0..100
    signature: str
    text: str  # sacrebleu's one-line summary: n-gram precisions, brevity penalty, lengths


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Bleu:
    """Corpus BLEU of detokenised hypotheses against one reference each."""
    try:
        from sacrebleu.metrics import BLEU
    except ImportError:
        raise UserError("BLEU needs sacrebleu: pip install sacrebleu") from None

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    metric = BLEU()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Bleu(float(result.score), str(metric.get_signature()), str(result))


@torch.no_grad()
def nll_per_token(
    layers: Sequence[nn.Module],
    data: TranslationDataset,
    split: str = "dev",
    batch_tokens: int = 4096,
    rows: Sequence[int] | None = None,
) -> tuple[float, int]:
    """(mean NLL per target token, number of target tokens) of a whole split (or its ``rows``),
    teacher-forced."""
    split_layers(layers)  # a full translation model
    device = next(layers[0].parameters()).device
    model = nn.Sequential(*layers)
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    try:
        for _, ((src, tgt_in), (tgt, _count)) in data.eval_pairs(split, batch_tokens, rows):
            logits = model((src.to(device), tgt_in.to(device))).float()
            tgt = tgt.to(device)
            total += float(
                F.cross_entropy(
                    logits.flatten(0, 1), tgt.flatten(), ignore_index=PAD, reduction="sum"
                )
            )
            tokens += int((tgt != PAD).sum())
    finally:
        model.train(was_training)
    return total / max(tokens, 1), tokens


def evaluate_translation(
    layers: Sequence[nn.Module],
    data: TranslationDataset,
    split: str = "dev",
    limit: int | None = None,
    batch_sentences: int = 64,
    nll_limit: int | None = None,
) -> dict:
    """BLEU (greedy decoding of the first ``limit`` sentences, all by default) and NLL of a split
    (of its first ``nll_limit`` sentences, all by default: learning curves score a subset often).

    A many->English mix (``data.corpus.parts``) is scored per language as well: ``by_language`` maps
    each source language to its own BLEU and NLL on its own rows of the split (``limit`` sentences
    of each), with its labels (corpus, synthetic, resource, training pairs); the overall BLEU is then
    over the decoded sentences of all languages together, the overall NLL over all their tokens."""
    parts = data.corpus.parts
    groups = [(None, None)] if not parts else [(p, p.rows(split)) for p in parts]
    hyps_all: list[str] = []
    refs_all: list[str] = []
    nll_sum, tokens_all = 0.0, 0
    by_language: dict[str, dict] = {}
    sources_all, refs_split = data.source_ids(split), data.references(split)
    for part, rows in groups:
        pool = list(rows if rows is not None else range(len(sources_all)))
        scored = pool[:nll_limit] if nll_limit is not None else rows
        nll, tokens = nll_per_token(layers, data, split, rows=scored)
        chosen = pool[:limit]
        refs = [refs_split[i] for i in chosen]
        ids = translate_ids(
            layers, [sources_all[i] for i in chosen], batch_sentences=batch_sentences
        )
        hyps = data.vocab.decode(ids)
        hyps_all += hyps
        refs_all += refs
        nll_sum, tokens_all = nll_sum + nll * tokens, tokens_all + tokens
        if part is not None:
            score = bleu(hyps, refs)
            by_language[part.src] = {
                **part.describe(),
                "bleu": score.score,
                "bleu_detail": score.text,
                "nll": nll,
                "nll_tokens": tokens,
                "sentences": len(refs),
                "examples": [{"hyp": h, "ref": r} for h, r in list(zip(hyps, refs))[:2]],
            }
    score = bleu(hyps_all, refs_all)
    return {
        "split": split,
        "bleu": score.score,
        "bleu_signature": score.signature,
        "bleu_detail": score.text,
        "nll": nll_sum / max(tokens_all, 1),
        "nll_tokens": tokens_all,
        "bleu_sentences": len(refs_all),
        "corpus": data.corpus.name,
        "synthetic": data.corpus.synthetic,
        "examples": [{"hyp": h, "ref": r} for h, r in list(zip(hyps_all, refs_all))[:3]],
        "by_language": by_language or None,
    }
