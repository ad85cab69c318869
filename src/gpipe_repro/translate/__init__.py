"""Translating with a trained T(L, H, A) and scoring it: greedy decoding, BLEU, NLL per token."""

from __future__ import annotations

from .decode import greedy_decode, split_layers, translate, translate_ids
from .score import Bleu, bleu, evaluate_translation, nll_per_token

__all__ = [
    "Bleu",
    "bleu",
    "evaluate_translation",
    "greedy_decode",
    "nll_per_token",
    "split_layers",
    "translate",
    "translate_ids",
]
