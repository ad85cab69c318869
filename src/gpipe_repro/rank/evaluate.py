"""Evaluation after training, chosen by the model's task and typed end to end (``EvalMetrics``).

- Classifiers and language models (and a translation model on synthetic pairs) are evaluated through
  the pipeline: accuracy and loss on the held-out split with the running BatchNorm statistics.
- A translation model on real parallel text (a dataset whose ``DataSpec.text`` is set) is decoded
  greedily and scored with BLEU: decoding runs token by token with the whole model, so the stages'
  trained layers are gathered on the reporting rank and evaluated there in one process.

Every rank calls its evaluation (both are collective); the reporting rank (last stage, replica 0)
returns the metrics, the others None. ``curve=True``: a learning-curve point (``train.eval_every``):
a translation model scores the dev split (``train.curve_limit`` sentences, NLL and BLEU; the test
split stays for the end), the others their evaluation split as at the end.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..config import RunConfig
from ..data import Dataset, get_data
from ..engine import Pipeline, Topology
from ..metrics.contract import EvalMetrics
from ..models import materialize
from ..runplan.plan import ModelPlan

__all__ = ["Evaluation", "Trained", "evaluation_for", "through_pipeline", "by_decoding"]


@dataclass
class Trained:
    """What an evaluation reads of a rank that has trained."""

    spec: RunConfig
    topo: Topology
    model: ModelPlan
    pipe: Pipeline
    data: Dataset | None
    indices: list[int]  # the global index of each of this stage's layers (``pipe.layers``)


Evaluation = Callable[[Trained, bool], "EvalMetrics | None"]


def evaluation_for(spec: RunConfig, model: ModelPlan) -> Evaluation:
    """The model's evaluation for this dataset (the same answer on every rank: it is collective)."""
    if model.model.task == "translate" and get_data(spec.data.name).text:
        return by_decoding
    return through_pipeline


@torch.no_grad()
def through_pipeline(t: Trained, curve: bool = False) -> EvalMetrics | None:
    """Accuracy and loss on the evaluation split, through the pipeline (running BN statistics).

    The split streams batch by batch (``Dataset.eval_batches``) on the first stage (inputs) and the
    last (labels); each batch is padded to a multiple of M and the padding ignored. Only the first
    stage knows how many samples come next, so it tells every rank before each batch (0: done).
    Every replica evaluates the whole split."""
    topo, M = t.topo, t.spec.pipeline.M
    B = max(M, t.spec.train.eval_batch_size // M * M)
    batches = t.data.eval_batches(B) if t.data is not None else iter(())
    correct = total = samples = 0
    loss_sum = 0.0
    while True:
        xb, yb = next(batches, (None, None))
        box = [0 if yb is None else int(yb.shape[0])]
        if topo.distributed:
            dist.broadcast_object_list(box, src=0)
        n = box[0]
        if n == 0:
            break
        out = t.pipe.forward(_pad(xb, (-n) % M) if topo.is_first else None)
        if topo.is_last:
            assert yb is not None and out is not None
            logits = out[:n].float().cpu()  # type: ignore[union-attr]
            c, counted = t.model.model.correct(logits, yb)
            correct, total, samples = correct + c, total + counted, samples + n
            loss_sum += float(t.model.model.loss_fn(logits, yb)) * n
    if not topo.is_last or samples == 0:
        return None
    return EvalMetrics(accuracy=correct / max(total, 1), loss=loss_sum / samples, samples=samples)


def by_decoding(t: Trained, curve: bool = False) -> EvalMetrics | None:
    """BLEU (greedy decoding) and NLL per target token on the test split (``curve``: the first
    ``train.curve_limit`` dev sentences), the whole model on the reporting rank (its layers gathered
    from the stages by global index, as a save holds them)."""
    from ..data.translation import TranslationDataset
    from ..translate import evaluate_translation

    topo = t.topo
    reporter = topo.is_last and topo.replica == 0
    mine = {str(i): layer.state_dict() for i, layer in zip(t.indices, t.pipe.layers)}
    parts: list[Any] = [mine]
    if topo.distributed:
        parts = [None] * topo.world_size
        dist.gather_object(
            mine if topo.replica == 0 else None, parts if reporter else None, dst=topo.K - 1
        )
    if not reporter:
        return None
    assert isinstance(t.data, TranslationDataset), "a text evaluation needs a TranslationDataset"
    states = {int(k): v for part in parts if part for k, v in part.items()}
    layers: list[nn.Module] = materialize([copy.deepcopy(m) for m in t.model.layers], t.spec.seed)
    for i, layer in enumerate(layers):
        layer.load_state_dict(states[i])
    with torch.no_grad():
        tr = t.spec.train
        out = evaluate_translation(
            [m.eval() for m in layers],
            t.data,
            split="dev" if curve else "test",
            limit=tr.curve_limit if curve else tr.eval_limit,
            nll_limit=tr.curve_limit if curve else None,
        )
    return EvalMetrics(
        accuracy=None,
        loss=out["nll"],
        samples=out["bleu_sentences"],
        bleu=out["bleu"],
        bleu_signature=out["bleu_signature"],
        by_language=out.get("by_language"),
    )


def _pad(x: Any, pad: int) -> Any:
    if not pad:
        return x
    if isinstance(x, tuple):
        return tuple(_pad(t, pad) for t in x)
    return torch.cat([x, x[:1].expand(pad, *x.shape[1:])])
