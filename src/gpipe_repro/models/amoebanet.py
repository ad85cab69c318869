"""AmoebaNet-D and AmoebaNet-B (L, D) as flat layer lists (paper §3-4; recipe: MODELS.md).

The TensorFlow reference recipe: a stride-2 3x3 stem, two reduction "stem cells" at D/4 and D/2,
then L normal cells in three stacks of L/3 at D, 2D and 4D filters with a reduction cell before the
2nd and 3rd stacks, and a ReLU - global-average-pool - dropout - FC head: L + 6 layers. Every cell
takes and returns the pair (current, previous). Parameter count (n = L/3, K classes):
P = (288.75n + 61.93359375)D² + (119n + 16K + 118.375)D + 928 + K.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GENOTYPES", "amoebanet_layers", "amoebanet_param_formula"]

# (operations, hidden-state indices, concatenated states) per cell kind
GENOTYPES: dict[str, dict[str, tuple[list[str], list[int], list[int]]]] = {
    "D": {
        "normal": (
            [
                "1x1",
                "max_pool_3x3",
                "none",
                "1x7_7x1",
                "1x1",
                "1x7_7x1",
                "max_pool_3x3",
                "none",
                "avg_pool_3x3",
                "1x1",
            ],
            [1, 1, 1, 0, 0, 0, 2, 2, 1, 5],
            [0, 3, 4, 6],
        ),
        "reduction": (
            [
                "max_pool_2x2",
                "max_pool_3x3",
                "none",
                "3x3",
                "1x7_7x1",
                "max_pool_3x3",
                "none",
                "max_pool_2x2",
                "avg_pool_3x3",
                "1x1",
            ],
            [0, 0, 2, 1, 2, 2, 3, 1, 2, 3],
            [4, 5, 6],
        ),
    },
    "B": {
        "normal": (
            [
                "1x1",
                "max_pool_3x3",
                "none",
                "separable_3x3_2",
                "1x1",
                "separable_3x3_2",
                "1x1",
                "none",
                "avg_pool_3x3",
                "1x1",
            ],
            [1, 1, 1, 0, 1, 0, 2, 2, 1, 5],
            [0, 3, 4, 6],
        ),
        "reduction": (
            [
                "max_pool_2x2",
                "max_pool_3x3",
                "none",
                "3x3",
                "separable_5x5_2",
                "max_pool_3x3",
                "none",
                "separable_3x3_2",
                "avg_pool_3x3",
                "1x1",
            ],
            [0, 0, 2, 1, 2, 2, 3, 1, 4, 3],
            [5, 6],
        ),
    },
}


def _same_pad(n: int, k: int, s: int) -> tuple[int, int]:
    out = math.ceil(n / s)
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def _pad2d(x: torch.Tensor, k: int, s: int, value: float = 0.0) -> torch.Tensor:
    ph = _same_pad(x.shape[2], k, s)
    pw = _same_pad(x.shape[3], k, s)
    return F.pad(x, (pw[0], pw[1], ph[0], ph[1]), value=value)


def relu_conv_bn(
    cin: int, cout: int, k: int | tuple[int, int] = 1, stride: int | tuple[int, int] = 1
) -> nn.Sequential:
    kk = (k, k) if isinstance(k, int) else k
    return nn.Sequential(
        nn.ReLU(),
        nn.Conv2d(cin, cout, kk, stride, padding=(kk[0] // 2, kk[1] // 2), bias=False),
        nn.BatchNorm2d(cout),
    )


class Pool(nn.Module):
    """'SAME'-padded pooling; average pooling excludes the padding (as TensorFlow's)."""

    def __init__(self, kind: str, k: int, stride: int) -> None:
        super().__init__()
        self.kind, self.k, self.stride = kind, k, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "max":
            return F.max_pool2d(_pad2d(x, self.k, self.stride, float("-inf")), self.k, self.stride)
        summed = F.avg_pool2d(_pad2d(x, self.k, self.stride), self.k, self.stride)
        ones = torch.ones_like(x[:1, :1])
        count = F.avg_pool2d(_pad2d(ones, self.k, self.stride), self.k, self.stride)
        return summed / count


class Separable(nn.Sequential):
    def __init__(self, cin: int, C: int, k: int, n: int, stride: int) -> None:
        mods: list[nn.Module] = []
        for i in range(n):
            c = cin if i == 0 else C
            mods += [
                nn.ReLU(),
                nn.Conv2d(c, c, k, stride if i == 0 else 1, padding=k // 2, groups=c, bias=False),
                nn.Conv2d(c, C, 1, bias=False),
                nn.BatchNorm2d(C),
            ]
        super().__init__(*mods)


class PoolOp(nn.Sequential):
    """A pooling, then a 1x1 conv + BN only when the input's channels differ from C."""

    def __init__(self, kind: str, k: int, stride: int, cin: int, C: int) -> None:
        mods: list[nn.Module] = [Pool(kind, k, stride)]
        if cin != C:
            mods += [nn.Conv2d(cin, C, 1, bias=False), nn.BatchNorm2d(C)]
        super().__init__(*mods)


def make_op(name: str, cin: int, C: int, stride: int) -> nn.Module:
    r = max(C // 4, 1)
    if name == "none":
        return relu_conv_bn(cin, C, 1, stride) if stride > 1 or cin != C else nn.Identity()
    if name == "1x1":
        return relu_conv_bn(cin, C, 1, stride)
    if name == "3x3":
        return nn.Sequential(
            relu_conv_bn(cin, r), relu_conv_bn(r, r, 3, stride), relu_conv_bn(r, C)
        )
    if name == "1x7_7x1":
        return nn.Sequential(
            relu_conv_bn(cin, r),
            relu_conv_bn(r, r, (1, 7), (1, stride)),
            relu_conv_bn(r, r, (7, 1), (stride, 1)),
            relu_conv_bn(r, C),
        )
    if name.startswith("separable_"):
        k, n = name.removeprefix("separable_").split("_")
        return Separable(cin, C, int(k.split("x")[0]), int(n), stride)
    if name.endswith("pool_3x3") or name.endswith("pool_2x2"):
        return PoolOp(name.split("_")[0], int(name[-1]), stride, cin, C)
    raise ValueError(f"unknown AmoebaNet operation {name!r}")


class FactorizedReduce(nn.Module):
    """Halve the spatial size with two offset 1x1 paths of C/2 channels each (ReLU first, BN after)."""

    def __init__(self, cin: int, C: int) -> None:
        super().__init__()
        self.p1 = nn.Conv2d(cin, C // 2, 1, bias=False)
        self.p2 = nn.Conv2d(cin, C - C // 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(x)
        a = self.p1(F.avg_pool2d(x, 1, 2))
        shifted = F.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:]
        b = self.p2(F.avg_pool2d(shifted, 1, 2))
        return self.bn(torch.cat([a, b], dim=1))


class Cell(nn.Module):
    """(current, previous) -> (output, current). Hidden states: 0 = current to C, 1 = previous to C.

    The first stem cell has no previous cell: its state 1 is the stem's output as it is (the
    reference passes ``prev_layer=None``), so the ops reading it see the stem's 32 channels."""

    def __init__(
        self,
        genotype: str,
        reduction: bool,
        C: int,
        cin_cur: int,
        cin_prev: int | None,
        prev_reduce: bool,
    ) -> None:
        super().__init__()
        ops, idx, concat = GENOTYPES[genotype]["reduction" if reduction else "normal"]
        self.idx, self.concat = idx, concat
        self.cur = relu_conv_bn(cin_cur, C)
        c1 = C
        if cin_prev is None:
            self.prev: nn.Module = nn.Identity()
            c1 = cin_cur
        elif prev_reduce:
            self.prev = FactorizedReduce(cin_prev, C)
        elif cin_prev != C:
            self.prev = relu_conv_bn(cin_prev, C)
        else:
            self.prev = nn.Identity()
        self.first = cin_prev is None
        self.ops = nn.ModuleList(
            make_op(op, c1 if i == 1 else C, C, 2 if reduction and i < 2 else 1)
            for op, i in zip(ops, idx)
        )
        self.out_channels = C * len(concat)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        cur, prev = pair
        h = [self.cur(cur), self.prev(cur if self.first else prev)]
        for i in range(len(self.ops) // 2):
            h.append(
                self.ops[2 * i](h[self.idx[2 * i]]) + self.ops[2 * i + 1](h[self.idx[2 * i + 1]])
            )
        return torch.cat([h[j] for j in self.concat], dim=1), cur


class Stem(nn.Module):
    def __init__(self, cin: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, 32, 3, 2, bias=False)  # 'VALID'
        self.bn = nn.BatchNorm2d(32)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.bn(self.conv(x))
        return h, h


class Head(nn.Module):
    def __init__(self, cin: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(cin, classes)

    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.fc(self.drop(F.relu(pair[0]).mean(dim=(2, 3))))


def amoebanet_layers(
    genotype: str,
    L: int,
    D: int,
    classes: int = 1000,
    in_channels: int = 3,
    image_size: int = 224,
    dropout: float = 0.0,
) -> list[nn.Module]:
    """AmoebaNet-{D,B}(L, D): L + 6 layers (stem, 2 stem cells, L normal + 2 reduction, head)."""
    if genotype not in GENOTYPES:
        raise ValueError(f"model.genotype={genotype!r} is unknown; allowed: D, B")
    if L < 3 or L % 3:
        raise ValueError(
            f"model.L={L} is invalid; allowed: a positive multiple of 3 (three stacks of L/3)"
        )
    if D < 4 or D % 4:
        raise ValueError(
            f"model.D={D} is invalid; allowed: a positive multiple of 4 (stem cells at D/4)"
        )
    if image_size < 8:
        raise ValueError(f"image_size={image_size} is too small; allowed: >= 8")
    layers: list[nn.Module] = [Stem(in_channels)]
    size = (image_size - 3) // 2 + 1
    cur_c = prev_c = 32
    prev_size = cur_size = size
    plan = [(True, D // 4), (True, D // 2)]
    for stack, C in enumerate((D, 2 * D, 4 * D)):
        if stack > 0:
            plan.append((True, C))
        plan += [(False, C)] * (L // 3)
    for i, (reduction, C) in enumerate(plan):
        cell = Cell(
            genotype,
            reduction,
            C,
            cur_c,
            None if i == 0 else prev_c,
            prev_reduce=prev_size != cur_size,
        )
        layers.append(cell)
        out_size = math.ceil(cur_size / 2) if reduction else cur_size
        prev_c, prev_size = cur_c, cur_size
        cur_c, cur_size = cell.out_channels, out_size
    layers.append(Head(cur_c, classes, dropout))
    return layers


def amoebanet_param_formula(L: int, D: int, classes: int = 1000) -> int:
    """MODELS.md's closed form for AmoebaNet-D (genotype D), used to check the builder."""
    n = L // 3
    return round(
        (288.75 * n + 61.93359375) * D * D + (119 * n + 16 * classes + 118.375) * D + 928 + classes
    )
