"""The models published anchors train, built on the meta device for counting (``sim.count``).

Each is built as its published runs train it, so that the FLOPs and bytes counted are the published
run's: ResNet-50 v1.5, BERT-Large, the Transformer base and T5 as encoder-decoders, GPT-3 1.3B and
2.7B as flash-attention's training scripts configure them, and Llama-3 8B as torchtitan does
(grouped-query attention, SwiGLU, RMSNorm). A model is a flat list of layers (its first the
embedding or stem, its last the head) and one input of 2 samples; ``seq`` is the tokens per sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...models import class_planning_loss, token_planning_loss

__all__ = ["ANCHOR_MODELS", "AnchorModel"]


@dataclass(frozen=True)
class AnchorModel:
    """A known model, as its published runs train it: its layers and one input batch (meta device)."""

    describe: str
    build: Callable[[int], tuple[list[nn.Module], Any]]  # seq -> (layers, input of 2 samples)
    loss: Callable[[Any], torch.Tensor]


class _Bottleneck(nn.Module):
    """ResNet v1.5's bottleneck block (He et al., 2016; the stride in the 3x3 convolution)."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def _resnet(blocks: tuple[int, ...]) -> Callable[[int], tuple[list[nn.Module], Any]]:
    def build(_seq: int) -> tuple[list[nn.Module], Any]:
        stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = [stem]
        cin = 64
        for stage, n in enumerate(blocks):
            width = 64 * 2**stage
            for b in range(n):
                layers.append(_Bottleneck(cin, width, 2 if b == 0 and stage > 0 else 1))
                cin = 4 * width
        layers.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(1), nn.Linear(cin, 1000)))
        return layers, torch.empty(2, 3, 224, 224)

    return build


def _transformer(
    L: int, d: int, H: int, A: int, V: int, head_dim: int | None = None
) -> Callable[[int], tuple[list[nn.Module], Any]]:
    def build(seq: int) -> tuple[list[nn.Module], Any]:
        from ...models.transformer import transformer_lm_layers

        layers = transformer_lm_layers(L, d, H, A, V, head_dim=head_dim)
        return layers, torch.zeros(2, seq, dtype=torch.long)

    return build


def _translation(
    L: int, d: int, H: int, A: int, V: int, target: int | None = None
) -> Callable[[int], tuple[list[nn.Module], Any]]:
    """An encoder-decoder T(L, H, A) at width d (``transformer_mt_layers``): a sample is a source of
    ``seq`` tokens and a target of ``target`` tokens (``None``: ``seq`` too)."""

    def build(seq: int) -> tuple[list[nn.Module], Any]:
        from ...models.transformer import transformer_mt_layers

        tgt = seq if target is None else target
        src = torch.ones(2, seq, dtype=torch.long)  # token 1: not padding
        return transformer_mt_layers(L, H, A, d, V), (src, torch.ones(2, tgt, dtype=torch.long))

    return build


class _LlamaBlock(nn.Module):
    """One Llama-3 layer (Dubey et al., 2024): x + Attn(RMSNorm(x)), then x + SwiGLU(RMSNorm(x));
    no biases; RoPE on Q and K; K and V repeated from ``kv`` heads to ``heads`` before SDPA (causal),
    as torchtitan's ``repeat_kv`` does."""

    def __init__(self, d: int, ffn: int, heads: int, kv: int) -> None:
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, d // heads
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.wq, self.wo = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, kv * self.hd, bias=False)
        self.wv = nn.Linear(d, kv * self.hd, bias=False)
        self.w1, self.w3 = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        a, b = x[..., ::2], x[..., 1::2]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, d = x.shape
        h = self.norm1(x)
        q = self.wq(h).view(B, S, self.heads, self.hd)
        k = self.wk(h).view(B, S, self.kv, self.hd)
        v = self.wv(h).view(B, S, self.kv, self.hd)
        angle = torch.arange(S, device=x.device)[:, None] * torch.ones(
            self.hd // 2, device=x.device
        )
        cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
        q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
        rep = self.heads // self.kv
        k = k[:, :, :, None, :].expand(B, S, self.kv, rep, self.hd).reshape(B, S, -1, self.hd)
        v = v[:, :, :, None, :].expand(B, S, self.kv, rep, self.hd).reshape(B, S, -1, self.hd)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.wo(y.transpose(1, 2).reshape(B, S, d))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class _LlamaHead(nn.Module):
    def __init__(self, d: int, V: int) -> None:
        super().__init__()
        self.norm, self.out = nn.RMSNorm(d), nn.Linear(d, V, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


def _llama(
    L: int, d: int, ffn: int, heads: int, kv: int, V: int
) -> Callable[[int], tuple[list[nn.Module], Any]]:
    def build(seq: int) -> tuple[list[nn.Module], Any]:
        layers: list[nn.Module] = [nn.Embedding(V, d)]
        layers += [_LlamaBlock(d, ffn, heads, kv) for _ in range(L)]
        layers.append(_LlamaHead(d, V))
        return layers, torch.zeros(2, seq, dtype=torch.long)

    return build


ANCHOR_MODELS: dict[str, AnchorModel] = {
    "resnet50": AnchorModel(
        "ResNet-50 v1.5, 224x224, 1000 classes", _resnet((3, 4, 6, 3)), class_planning_loss
    ),
    "bert_large": AnchorModel(
        "BERT-large as a Transformer encoder: L 24, d 1024, H 4096, A 16, vocabulary 30522, the "
        "masked-LM head over every token",
        _transformer(24, 1024, 4096, 16, 30522),
        token_planning_loss,
    ),
    "bert_large_squad": AnchorModel(
        "BERT-large fine-tuned for SQuAD: the same encoder, a 2-logit (start, end) head per token",
        _transformer(24, 1024, 4096, 16, 2),
        token_planning_loss,
    ),
    "transformer_base": AnchorModel(
        "Transformer base (Vaswani et al., 2017): 6 encoder + 6 decoder layers, d 512, H 2048, A 8, "
        "a shared vocabulary of 37000 (WMT'14 en-de BPE); a sample: seq source and seq target tokens",
        _translation(6, 512, 2048, 8, 37000),
        token_planning_loss,
    ),
    "t5_base": AnchorModel(
        "T5.1.1-base's FLOPs (Raffel et al., 2020): 12 + 12 layers, d 768, A 12, a 2-matrix FFN of H "
        "3072 (= GEGLU's 3 x 2048), vocabulary 32128; a sample: seq input tokens, 114 target tokens "
        "(span corruption's 512 -> 114)",
        _translation(12, 768, 3072, 12, 32128, target=114),
        token_planning_loss,
    ),
    "t5_large": AnchorModel(
        "T5.1.1-large's FLOPs: 24 + 24 layers, d 1024, A 16, a 2-matrix FFN of H 4224 (= GEGLU's 3 x "
        "2816), vocabulary 32128; a sample: seq input tokens, 114 target tokens",
        _translation(24, 1024, 4224, 16, 32128, target=114),
        token_planning_loss,
    ),
    "flax_wmt": AnchorModel(
        "Flax's WMT example (its default config): 6 + 6 layers, d 1024, H 4096, A 16, vocabulary "
        "32000; a sample: seq source and seq target tokens (packed)",
        _translation(6, 1024, 4096, 16, 32000),
        token_planning_loss,
    ),
    "llama3_8b": AnchorModel(
        "Llama-3 8B as torchtitan trains it: 32 layers of RMSNorm, attention with 32 query and 8 "
        "key/value heads of 128 (RoPE; K and V repeated to 32 heads before SDPA) and a SwiGLU FFN "
        "of 14336, untied vocabulary 128256",
        _llama(32, 4096, 14336, 32, 8, 128256),
        token_planning_loss,
    ),
    "gpt2_1.2b": AnchorModel(
        "Megatron-LM's 1.2B GPT-2 baseline (Shoeybi et al., 2019): 40 layers, d 1536, H 6144, A 16, "
        "vocabulary 51200 (50257 padded)",
        _transformer(40, 1536, 6144, 16, 51200),
        token_planning_loss,
    ),
    "gpt3_1.3b": AnchorModel(
        "GPT-3 XL (1.3B; Brown et al., 2020) as flash-attention's training/ runs it: 24 layers, d "
        "2048, H 8192, A 16, vocabulary 50257",
        _transformer(24, 2048, 8192, 16, 50257),
        token_planning_loss,
    ),
    "gpt3_2.7b": AnchorModel(
        "GPT-3 2.7B as flash-attention's training/ runs it: 32 layers, d 2560, H 10240, 20 heads of "
        "128 (its hdim128 config), vocabulary 50257",
        _transformer(32, 2560, 10240, 20, 50257, head_dim=128),
        token_planning_loss,
    ),
}
