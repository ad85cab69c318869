"""A/B candidate (temporary): each action's receive batched with the previous action's sends.

The other way to keep NCCL's order safe (issue #22): one group for every transfer of a rank, each
action's receive posted in one ``batch_isend_irecv`` with the sends of the action before it, no
receive posted further ahead. Kept only long enough to measure it against the channels.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from .comm import Work, wire
from .microbatch import Batch, as_tuple
from .transfers import Key, Transfers

__all__ = ["BatchedTransfers"]


class BatchedTransfers(Transfers):
    def start(self) -> None:
        super().start()
        self._ops: list[tuple[torch.Tensor, int, Key]] = []  # sends deferred to the next batch

    def _batch(self, recvs: list[tuple[torch.Tensor, int]]) -> list[Work]:
        sends, self._ops = self._ops, []
        ops = [dist.P2POp(dist.isend, t, peer) for t, peer, _ in sends]
        ops += [dist.P2POp(dist.irecv, b, peer) for b, peer in recvs]
        if not ops:
            return []
        chans = [self.topo.act_in, self.topo.act_out, self.topo.grad_in, self.topo.grad_out]
        fifo = next((c.fifo for c in chans if c is not None and c.fifo is not None), None)
        works: list[Any]
        if fifo is not None:
            one = fifo.post(lambda: dist.batch_isend_irecv(ops), "batch")
            works = [one] * len(ops)
        else:
            works = dist.batch_isend_irecv(ops)
        for (_, _, key), w in zip(sends, works):
            self._sends.setdefault(key, []).append(w)
        return list(works[len(sends) :])

    def prepost(self, i: int) -> None:
        a = self.actions[i]
        key = self._key(a)
        if key is None or key in self._posted:
            self._batch([])
            return
        if key[0] == "F":
            ch = self.topo.act_in
            assert ch is not None
            if self.in_meta is None:
                self._batch([])
                self.in_meta = ch.recv_meta(self.device)
            metas = [m for m in self.in_meta[0] if m.crosses]
        else:
            ch = self.topo.grad_in
            assert ch is not None and self.out_meta is not None
            metas = [m for m in self.out_meta if m.crosses and m.is_float]
        bufs = [torch.empty(m.shape, dtype=m.dtype, device=self.device) for m in metas]
        works = self._batch([(b, ch.peer) for b in bufs])
        self._posted[key] = (bufs, works)

    def send_activations(self, m: int, y: Batch) -> None:
        ch = self.topo.act_out
        assert ch is not None
        ys = as_tuple(y)
        if self.out_meta is None:
            from .comm import describe

            self.out_meta = describe(ys, aliases=True)
            w = ch.send_meta(self.out_meta, isinstance(y, tuple), self.device)
            if w is not None:
                self._sends.setdefault(("F", m), []).append(w)
        self._ops += [(t.detach().contiguous(), ch.peer, ("F", m)) for t in wire(ys, self.out_meta)]

    def send_gradients(self, m: int, grads: list[torch.Tensor]) -> None:
        ch = self.topo.grad_out
        assert ch is not None
        self._ops += [(t.detach().contiguous(), ch.peer, ("B", m)) for t in grads]

    def drain(self) -> None:
        self._batch([])
        super().drain()
