"""BatchNorm for micro-batches, as the paper prescribes (§2.2).

In training each micro-batch is normalised with its own statistics, but the running statistics used
at evaluation must track the *whole mini-batch*. ``MicroBatchNorm`` therefore accumulates sufficient
statistics (count, mean, M2) of every micro-batch and folds them into the running buffers once, when
the engine calls :func:`commit` at the end of the mini-batch. The result equals ``nn.BatchNorm`` run on
the whole mini-batch, including PyTorch's unbiased running variance. Forward passes that recompute a
cell (rematerialisation) run inside :func:`recomputing` and add nothing. With data-parallel replicas
the statistics are summed over the replica group first, so the running buffers describe the global
mini-batch on every replica.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

__all__ = ["MicroBatchNorm", "convert_batchnorm", "commit", "recomputing"]

_RECOMPUTING = [False]


@contextlib.contextmanager
def recomputing() -> Iterator[None]:
    """Forward passes inside this context do not count towards running statistics."""
    prev = _RECOMPUTING[0]
    _RECOMPUTING[0] = True
    try:
        yield
    finally:
        _RECOMPUTING[0] = prev


class MicroBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm whose running statistics advance once per mini-batch."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        self._stats: list[tuple[float, torch.Tensor, torch.Tensor]] = []

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        if not self.training or not self.track_running_stats:
            return F.batch_norm(
                x,
                self.running_mean,
                self.running_var,
                self.weight,
                self.bias,
                not self.track_running_stats or self.training,
                0.0,
                self.eps,
            )
        if not _RECOMPUTING[0]:
            with torch.no_grad():
                n = x.numel() // x.shape[1]
                # one fused pass for both statistics (mean, and M2 = n x the biased variance)
                var, mean = torch.var_mean(
                    x.detach().float(), [0, *range(2, x.dim())], correction=0
                )
                self._stats.append((float(n), mean, var * n))
        # Normalise with the micro-batch's own statistics; running buffers are not touched here.
        return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)

    @torch.no_grad()
    def commit(self, group: dist.ProcessGroup | None = None) -> None:
        """Fold the accumulated micro-batch statistics into the running buffers (once per step)."""
        if not self._stats:
            return
        # Chan et al.'s combination of (count, mean, M2) over all micro-batches at once: a handful of
        # tensor operations per layer whatever M (a pairwise loop runs ~7 per micro-batch and layer).
        stats, counts = self._stats, [s[0] for s in self._stats]
        n = float(sum(counts))
        if len(stats) == 1:
            mean, m2 = stats[0][1], stats[0][2]
        else:
            means = torch.stack([s[1] for s in stats])
            if len(set(counts)) == 1:  # equal micro-batches (the usual case): no weights to apply
                mean = means.mean(0)
                spread = ((means - mean) ** 2).sum(0).mul_(counts[0])
            else:
                ns = torch.tensor(counts, dtype=means.dtype, device=means.device).unsqueeze(1)
                mean = (means * ns).sum(0) / n
                spread = ((means - mean) ** 2 * ns).sum(0)
            m2 = torch.stack([s[2] for s in stats]).sum(0).add_(spread)
        self._stats.clear()
        if group is not None and dist.get_world_size(group) > 1:
            # Sum (count, sum, sum of squares about zero) over the replicas.
            buf = torch.cat(
                [
                    torch.tensor([n], dtype=mean.dtype, device=mean.device),
                    mean * n,
                    m2 + mean**2 * n,
                ]
            )
            dist.all_reduce(buf, group=group)
            n = float(buf[0].item())
            C = mean.numel()
            s, sq = buf[1 : 1 + C], buf[1 + C :]
            mean = s / n
            m2 = sq - mean**2 * n
        var_unbiased = m2 / max(n - 1.0, 1.0)
        assert self.running_mean is not None and self.running_var is not None
        assert self.num_batches_tracked is not None
        self.num_batches_tracked.add_(1)
        if self.momentum is None:
            factor = 1.0 / float(self.num_batches_tracked.item())
        else:
            factor = self.momentum
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), factor)
        self.running_var.lerp_(var_unbiased.to(self.running_var.dtype), factor)


def convert_batchnorm(module: nn.Module) -> nn.Module:
    """Replace every ``nn.BatchNorm{1,2,3}d`` in ``module`` by a ``MicroBatchNorm`` sharing its state."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(
        module, MicroBatchNorm
    ):
        new = MicroBatchNorm(
            module.num_features,
            module.eps,
            module.momentum,
            module.affine,
            module.track_running_stats,
        )
        if module.affine:
            new.weight = module.weight
            new.bias = module.bias
        if module.track_running_stats:
            new.running_mean = module.running_mean
            new.running_var = module.running_var
            new.num_batches_tracked = module.num_batches_tracked
        new.train(module.training)
        return new
    for name, child in module.named_children():
        new_child = convert_batchnorm(child)
        if new_child is not child:
            setattr(module, name, new_child)
    return module


def commit(module: nn.Module, group: dist.ProcessGroup | None = None) -> None:
    """Commit the running statistics of every ``MicroBatchNorm`` in ``module``."""
    for m in module.modules():
        if isinstance(m, MicroBatchNorm):
            m.commit(group)
