"""A stage's transfers during one step: receives posted ahead, sends held until they complete.

Receives are posted up to ``lookahead`` actions ahead of the action that needs them (paper §2.3: a
stage should find its next input already there), each on its own channel (``comm.Channel``) and in
the order of that channel's actions — activations in forward order, gradients in backward order — so
that on NCCL, where a channel's operations run in posting order, a receive posted ahead never blocks
a send the peer needs first. An activation receive needs the step's handshake (shapes and dtypes)
first; a gradient receive needs this stage's own first forward output.

Sends are asynchronous; each is held until it completes and released as soon as it has, so a sent
activation that nothing else references — the output of a rematerialised micro-batch — is freed
then, not at the end of the step. Completion is asked after every action (``is_completed``: a CUDA
event query on NCCL). gloo's sends report completion only once waited for, so there a send is
also released as soon as the stage knows its peer took it (the wait returns at once): a
micro-batch's activation sends when its gradient arrives (the next stage computed that
backward), its gradient sends when an activation arrives that the previous stage sent after it
took that gradient (read off the previous stage's action list: ``schedule.gradients_taken``).
Without the second rule a gloo stage held every gradient it sent until the end of the step: M
micro-batches' input gradients, which under 1F1B outweigh the min(K - k, M) micro-batches the
schedule keeps alive.
"""

from __future__ import annotations

import torch

from .comm import TensorMeta, Work, describe, rebuild, wire
from .events import Recorder
from .microbatch import Batch, as_tuple
from .schedule import Action
from .topology import Topology

__all__ = ["Transfers"]

Key = tuple[str, int]  # ("F", mb): activations of micro-batch mb; ("B", mb): their gradients


class Transfers:
    """The receives and sends of one stage; :meth:`start` begins a step."""

    def __init__(
        self,
        topo: Topology,
        actions: list[Action],
        lookahead: int,
        recorder: Recorder,
        taken: dict[int, list[int]] | None = None,
    ) -> None:
        """``taken``: ``schedule.gradients_taken`` of this stage (None: no such release)."""
        self.topo, self.device, self.actions = topo, topo.device, actions
        self._taken = taken or {}
        self.lookahead, self.recorder = lookahead, recorder
        self.in_meta: tuple[list[TensorMeta], bool] | None = None
        self.out_meta: list[TensorMeta] | None = None
        self._posted: dict[Key, tuple[list[torch.Tensor], list[Work]]] = {}
        self._sends: dict[Key, list[Work]] = {}  # ("F", mb): activations sent, ("B", mb): gradients

    def start(self) -> None:
        """A new step: shapes may change per step, so they are described again."""
        self.in_meta = self.out_meta = None
        self._posted = {}
        self._sends = {}

    # ------------------------------------------------------------------ receives
    def _key(self, a: Action) -> Key | None:
        if a.kind == "F" and self.topo.act_in is not None:
            return ("F", a.mb)
        if a.kind == "B" and self.topo.grad_in is not None:
            return ("B", a.mb)
        return None

    def _post(self, key: Key) -> bool:
        if key in self._posted:
            return True
        if key[0] == "F":
            if self.in_meta is None:
                return False
            assert self.topo.act_in is not None
            metas = [m for m in self.in_meta[0] if m.crosses]
            self._posted[key] = self.topo.act_in.irecv(metas, self.device)
        else:
            if self.out_meta is None:
                return False
            assert self.topo.grad_in is not None
            metas = [m for m in self.out_meta if m.crosses and m.is_float]
            self._posted[key] = self.topo.grad_in.irecv(metas, self.device)
        return True

    def prepost(self, i: int) -> None:
        """Post the receives of actions ``i .. i + lookahead - 1`` that are not posted yet."""
        for a in self.actions[i : i + self.lookahead]:
            key = self._key(a)
            if key is not None:
                self._post(key)

    def _take(self, key: Key) -> list[torch.Tensor]:
        with self.recorder.span("wait", key[1]):
            if key not in self._posted:
                if key[0] == "F" and self.in_meta is None:
                    assert self.topo.act_in is not None
                    self.in_meta = self.topo.act_in.recv_meta(self.device)
                self._post(key)
            bufs, works = self._posted.pop(key)
            for w in works:
                w.wait()
        return bufs

    def activations(self, m: int) -> Batch:
        """Micro-batch m's input from the previous stage; its float tensors require grad."""
        bufs = self._take(("F", m))
        for g in self._taken.get(m, []):  # the previous stage took these before sending m
            for w in self._sends.pop(("B", g), []):
                w.wait()
        for b in bufs:
            if b.is_floating_point():
                b.requires_grad_(True)
        assert self.in_meta is not None
        return rebuild(bufs, *self.in_meta)

    def gradients(self, m: int) -> list[torch.Tensor]:
        """The gradients of micro-batch m's crossing float outputs, from the next stage."""
        grads = self._take(("B", m))
        for w in self._sends.pop(("F", m), []):  # they arrived: the peer computed this backward
            w.wait()
        return grads

    # ------------------------------------------------------------------ sends
    def send_activations(self, m: int, y: Batch) -> None:
        ch = self.topo.act_out
        assert ch is not None
        ys = as_tuple(y)
        held = self._sends.setdefault(("F", m), [])
        if self.out_meta is None:
            self.out_meta = describe(ys, aliases=True)
            w = ch.send_meta(self.out_meta, isinstance(y, tuple), self.device)
            if w is not None:
                held.append(w)
        with self.recorder.span("send", m):
            held += ch.isend(wire(ys, self.out_meta))

    def send_gradients(self, m: int, grads: list[torch.Tensor]) -> None:
        ch = self.topo.grad_out
        assert ch is not None
        with self.recorder.span("send", m):
            self._sends.setdefault(("B", m), []).extend(ch.isend(grads))

    def release(self) -> None:
        """Drop the sends that completed (and with them their tensors)."""
        for key in list(self._sends):
            left = [w for w in self._sends[key] if not w.is_completed()]
            if left:
                self._sends[key] = left
            else:
                del self._sends[key]

    def drain(self) -> None:
        """Wait for every send of the step."""
        with self.recorder.span("send"):
            for works in self._sends.values():
                for w in works:
                    w.wait()
        self._sends = {}

    @property
    def held(self) -> list[Key]:
        """The micro-batches whose sends are not known to be complete, in posting order."""
        return list(self._sends)
