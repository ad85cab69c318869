"""Transformer-L (Table 1/2/3) and T(L, H, A) (§5) as flat layer lists (recipe: MODELS.md).

Pre-LayerNorm layers; attention has Q, K, V and output projections with biases and a learned
per-head-dim scale on the queries (lingvo's per_dim_scale); feed-forward d -> H -> d with biases and
ReLU; sinusoidal positions (no parameters); no final LayerNorm; an untied softmax layer with bias.

- Transformer-L (decoder-only LM): embed, L layers, softmax = L + 2 layers;
  P(L) = 50,358,336 L + 131,104,000 at d = 2048, H = 8192, V = 32000.
- T(L, H, A) (encoder-decoder, d = 1024, V = 64000, head dim 64): embed, L encoder layers, L decoder
  layers, softmax = 2L + 2 layers carrying (encoder state, decoder state, source mask). Token id 0
  (``PAD_ID``) is padding: the embedding derives the source mask (True = a real token) from it, the
  encoder's self-attention and the decoder's cross-attention ignore padded source positions, and
  ``token_loss`` ignores padded targets (the decoder needs no target mask: it is causal and targets
  are padded at the end). The mask is a bool tensor, so the engine sends it but asks no gradient.

The paper's trainability options for deep models (§5): ``ffn_init_scale`` divides the feed-forward
initialisation by the number of layers (Fixup-like) and ``logit_clip`` clips the softmax
pre-activations to [-c, c].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "PAD_ID",
    "transformer_lm_layers",
    "transformer_mt_layers",
    "Attention",
    "lm_param_formula",
    "token_loss",
]

PAD_ID = 0
KVCache = dict[str, torch.Tensor]
MTState = tuple[torch.Tensor, ...]  # (enc, dec) or (enc, dec, source mask)


def sinusoid(
    S: int, d: int, device: torch.device | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    pos = torch.arange(S, device=device, dtype=torch.float32)[:, None]
    i = torch.arange(0, d, 2, device=device, dtype=torch.float32)
    ang = pos / torch.pow(10000.0, i / d)
    pe = torch.zeros(S, d, device=device)
    pe[:, 0::2] = torch.sin(ang)
    pe[:, 1::2] = torch.cos(ang[:, : d // 2])
    return pe.to(dtype)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, head_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.h, self.hd = heads, head_dim
        w = heads * head_dim
        self.q, self.k, self.v = nn.Linear(d, w), nn.Linear(d, w), nn.Linear(d, w)
        self.o = nn.Linear(w, d)
        self.per_dim_scale = nn.Parameter(torch.zeros(head_dim))
        self.dropout = dropout

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.per_dim_scale)

    def forward(
        self,
        x: torch.Tensor,
        mem: torch.Tensor | None = None,
        causal: bool = False,
        key_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """``key_mask`` (B, T) bool: True where a key is a real token (padded keys get no weight).

        ``cache`` (decoding, one new position per call): self-attention appends this call's keys and
        values to the cached ones and lets the new query see them all; cross-attention projects
        ``mem`` once and reuses it."""
        B, S, _ = x.shape
        q = self.q(x).view(B, S, self.h, self.hd).transpose(1, 2)
        if cache is not None and mem is not None and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            kv = x if mem is None else mem
            T = kv.shape[1]
            k = self.k(kv).view(B, T, self.h, self.hd).transpose(1, 2)
            v = self.v(kv).view(B, T, self.h, self.hd).transpose(1, 2)
            if cache is not None:
                if mem is None and "k" in cache:
                    k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        causal = causal and (cache is None or k.shape[2] == S)  # a cached step sees every key
        # softplus(0) * 1.442695 = 1: the learned scale starts at 1/sqrt(head_dim)
        q = q * (F.softplus(self.per_dim_scale) * 1.442695041)
        mask = None if key_mask is None else key_mask[:, None, None, :]
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=causal,
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.o(y.transpose(1, 2).reshape(B, S, self.h * self.hd))


class FFN(nn.Module):
    def __init__(self, d: int, H: int, dropout: float, init_scale: float = 1.0) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, H), nn.Linear(H, d)
        self.drop = nn.Dropout(dropout)
        self.init_scale = init_scale
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.init_scale != 1.0 and self.fc1.weight.device.type != "meta":
            with torch.no_grad():
                self.fc1.weight.mul_(self.init_scale)
                self.fc2.weight.mul_(self.init_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.relu(self.fc1(x))))


class LMLayer(nn.Module):
    """Pre-LN decoder-only layer: x + Attn(LN(x)) (causal), then x + FFN(LN(x))."""

    def __init__(
        self, d: int, H: int, A: int, head_dim: int, dropout: float, ffn_scale: float
    ) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, A, head_dim)
        self.ffn = FFN(d, H, dropout, ffn_scale)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x), causal=True))
        return x + self.drop(self.ffn(self.ln2(x)))


class Embed(nn.Module):
    """Token embedding times sqrt(d) plus sinusoidal positions (Vaswani et al. 2017, §3.4, §3.5).

    The table starts at std d^-1/2 (as in tensor2tensor), so the scaled embedding has unit scale like
    the positions; PyTorch's default std 1 would make it sqrt(d) times larger, and with no final
    LayerNorm the first logits would be huge (initial loss ~27 instead of ~ln V at d = 128).
    """

    def __init__(self, V: int, d: int, dropout: float) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, d)
        self.drop = nn.Dropout(dropout)
        self.d = d
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.emb.weight.device.type != "meta":
            nn.init.normal_(self.emb.weight, std=self.d**-0.5)

    def embed(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Embeddings of ``tokens`` at positions ``offset``, ``offset + 1``, ..."""
        h = self.emb(tokens) * math.sqrt(self.d)
        pos = sinusoid(offset + tokens.shape[1], self.d, h.device, h.dtype)[offset:]
        return self.drop(h + pos)

    def forward(self, tokens: torch.Tensor | tuple[torch.Tensor, torch.Tensor]):
        if isinstance(tokens, tuple):  # (source, target) for translation
            src, tgt = tokens
            return self.embed(src), self.embed(tgt), src != PAD_ID
        return self.embed(tokens)


class Softmax(nn.Module):
    """The untied output layer d -> V with bias; optional logit clipping (§5)."""

    def __init__(self, d: int, V: int, logit_clip: float | None) -> None:
        super().__init__()
        self.proj = nn.Linear(d, V)
        self.clip = logit_clip

    def forward(self, x: torch.Tensor | MTState) -> torch.Tensor:
        h = x[1] if isinstance(x, tuple) else x
        logits = self.proj(h)
        return logits.clamp(-self.clip, self.clip) if self.clip else logits


def transformer_lm_layers(
    L: int,
    d: int = 2048,
    H: int = 8192,
    A: int = 32,
    V: int = 32000,
    head_dim: int | None = None,
    dropout: float = 0.0,
    ffn_init_scale: bool = False,
    logit_clip: float | None = None,
) -> list[nn.Module]:
    """Transformer-L: embed, L pre-LN layers, softmax (L + 2 layers)."""
    if L < 1:
        raise ValueError(f"model.L={L} is invalid; allowed: an integer >= 1")
    if head_dim is None:
        if d % A:
            raise ValueError(f"model.d={d} is not divisible by model.A={A} heads")
        head_dim = d // A
    scale = 1.0 / L if ffn_init_scale else 1.0
    return [
        Embed(V, d, dropout),
        *[LMLayer(d, H, A, head_dim, dropout, scale) for _ in range(L)],
        Softmax(d, V, logit_clip),
    ]


def lm_param_formula(L: int) -> int:
    """MODELS.md: P(L) = 50,358,336 L + 131,104,000 at d=2048, H=8192, A=32, V=32000."""
    return 50_358_336 * L + 131_104_000


class EncoderLayer(nn.Module):
    """(enc, dec[, mask]) -> (enc + Attn + FFN, dec[, mask]); attention skips padded sources."""

    def __init__(self, d: int, H: int, A: int, dropout: float, ffn_scale: float) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, A, 64)
        self.ffn = FFN(d, H, dropout, ffn_scale)
        self.drop = nn.Dropout(dropout)

    def forward(self, state: MTState) -> MTState:
        enc, dec, *mask = state
        enc = enc + self.drop(self.attn(self.ln1(enc), key_mask=mask[0] if mask else None))
        return (enc + self.drop(self.ffn(self.ln2(enc))), dec, *mask)


class DecoderLayer(nn.Module):
    """(enc, dec[, mask]) -> (enc, dec + causal self-attention + cross-attention + FFN[, mask])."""

    def __init__(self, d: int, H: int, A: int, dropout: float, ffn_scale: float) -> None:
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn, self.cross_attn = Attention(d, A, 64), Attention(d, A, 64)
        self.ffn = FFN(d, H, dropout, ffn_scale)
        self.drop = nn.Dropout(dropout)

    def forward(self, state: MTState, cache: dict[str, KVCache] | None = None) -> MTState:
        """``cache``: incremental decoding, ``dec`` holding only the newest position (see Attention)."""
        enc, dec, *mask = state
        self_cache = None if cache is None else cache.setdefault("self", {})
        cross_cache = None if cache is None else cache.setdefault("cross", {})
        dec = dec + self.drop(self.self_attn(self.ln1(dec), causal=True, cache=self_cache))
        key_mask = mask[0] if mask else None
        dec = dec + self.drop(
            self.cross_attn(self.ln2(dec), mem=enc, key_mask=key_mask, cache=cross_cache)
        )
        return (enc, dec + self.drop(self.ffn(self.ln3(dec))), *mask)


def transformer_mt_layers(
    L: int,
    H: int,
    A: int,
    d: int = 1024,
    V: int = 64000,
    dropout: float = 0.0,
    ffn_init_scale: bool = False,
    logit_clip: float | None = None,
) -> list[nn.Module]:
    """T(L, H, A): embed (shared source/target), L encoder + L decoder layers, softmax (2L + 2)."""
    if L < 1:
        raise ValueError(f"model.L={L} is invalid; allowed: an integer >= 1")
    scale = 1.0 / (2 * L) if ffn_init_scale else 1.0
    return [
        Embed(V, d, dropout),
        *[EncoderLayer(d, H, A, dropout, scale) for _ in range(L)],
        *[DecoderLayer(d, H, A, dropout, scale) for _ in range(L)],
        Softmax(d, V, logit_clip),
    ]


def token_loss(logits: torch.Tensor, targets: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """A micro-batch's share of the mini-batch's per-token NLL: for ``Pipeline(loss_reduction="sum")``.

    ``targets = (tgt, tokens)``: ``tgt`` (n, T) padded with ``PAD_ID`` (ignored), ``tokens`` (n,) holds
    the whole mini-batch's number of target tokens in every row (rows split into micro-batches with
    ``tgt``). Summed over the micro-batches, the shares give the mini-batch's mean NLL per target token
    whatever M and however the tokens fall into micro-batches.
    """
    tgt, tokens = targets
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # fp16/bf16 -> fp32
    nll = F.cross_entropy(
        logits.flatten(0, -2), tgt.flatten(), ignore_index=PAD_ID, reduction="sum"
    )
    return nll / tokens[0].to(nll.dtype)
