"""A stage's transfers during one step: receives posted ahead, sends held until they complete.

Receives are posted up to ``lookahead`` actions ahead of the action that needs them (paper §2.3: a
stage should find its next input already there), each on its own channel (``comm.Channel``) and in
the order of that channel's actions — activations in forward order, gradients in backward order — so
that on NCCL, where a channel's operations run in posting order, a receive posted ahead never blocks
a send the peer needs first. With several model chunks per rank one channel carries every chunk's
messages in that order (``schedule``: the peer sends them in the order this stage consumes them); a
receive that cannot be posted yet (its chunk's shapes are not known) stops the posting on its
channel, so nothing is ever posted out of order. An activation receive needs its chunk's handshake
(shapes and dtypes) of the step first; a gradient receive needs this chunk's own first forward
output.

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

With one rank (K = 1) and several chunks, chunk c hands its output to chunk c+1 in this process:
a copy (as a transfer makes one), so the next chunk's leaves are its own and the update is the one
a transfer gives.
"""

from __future__ import annotations

import torch

from .comm import Channel, TensorMeta, Work, describe, rebuild, wire
from .events import Recorder
from .microbatch import Batch, as_tuple
from .schedule import Action, virtual_stage
from .topology import Topology

__all__ = ["Transfers"]

# ("F", chunk, mb): activations into chunk's forward of mb; ("B", chunk, mb): the gradients of
# chunk's outputs for mb (received), or of its inputs (sent)
Key = tuple[str, int, int]


class Transfers:
    """The receives and sends of one stage; :meth:`start` begins a step."""

    def __init__(
        self,
        topo: Topology,
        actions: list[Action],
        lookahead: int,
        recorder: Recorder,
        taken: dict[tuple[int, int], list[tuple[int, int]]] | None = None,
        chunks: int = 1,
    ) -> None:
        """``taken``: ``schedule.gradients_taken`` of this stage (None: no such release);
        ``chunks``: the model chunks this stage holds (v)."""
        self.topo, self.device, self.actions = topo, topo.device, actions
        self.v, self.S = chunks, topo.K * chunks
        self.local = topo.K == 1  # chunks hand over in this process
        self._taken = taken or {}
        self.lookahead, self.recorder = lookahead, recorder
        self.in_meta: dict[int, tuple[list[TensorMeta], bool]] = {}
        self.out_meta: dict[int, list[TensorMeta]] = {}
        self._posted: dict[Key, tuple[list[torch.Tensor], list[Work]]] = {}
        self._sends: dict[
            Key, list[Work]
        ] = {}  # ("F", c, mb): activations, ("B", c, mb): gradients
        self._box: dict[Key, tuple[list[torch.Tensor], tuple[list[TensorMeta], bool]]] = {}

    def start(self) -> None:
        """A new step: shapes may change per step, so they are described again."""
        self.in_meta, self.out_meta = {}, {}
        self._posted, self._sends, self._box = {}, {}, {}

    def _stage(self, chunk: int) -> int:
        return virtual_stage(self.topo.K, self.topo.stage, chunk)

    # ------------------------------------------------------------------ receives
    def _key(self, a: Action) -> Key | None:
        if self.local:
            return None
        s = self._stage(a.chunk)
        if a.kind == "F" and s > 0:
            return ("F", a.chunk, a.mb)
        if a.kind == "B" and s < self.S - 1:
            return ("B", a.chunk, a.mb)
        return None

    def _post(self, key: Key) -> bool:
        if key in self._posted:
            return True
        kind, c, _ = key
        if kind == "F":
            if c not in self.in_meta:
                return False
            assert self.topo.act_in is not None
            metas = [m for m in self.in_meta[c][0] if m.crosses]
            self._posted[key] = self.topo.act_in.irecv(metas, self.device)
        else:
            if c not in self.out_meta:
                return False
            assert self.topo.grad_in is not None
            metas = [m for m in self.out_meta[c] if m.crosses and m.is_float]
            self._posted[key] = self.topo.grad_in.irecv(metas, self.device)
        return True

    def prepost(self, i: int) -> None:
        """Post the receives of actions ``i .. i + lookahead - 1`` that are not posted yet, in
        order on each channel (stopping a channel at a receive that cannot be posted yet)."""
        stopped: set[str] = set()
        for a in self.actions[i : i + self.lookahead]:
            key = self._key(a)
            if key is not None and key[0] not in stopped and not self._post(key):
                stopped.add(key[0])

    def _take(self, key: Key) -> list[torch.Tensor]:
        with self.recorder.span("wait", key[2], key[1]):
            if key not in self._posted:
                if key[0] == "F" and key[1] not in self.in_meta:
                    assert self.topo.act_in is not None
                    self.in_meta[key[1]] = self.topo.act_in.recv_meta(self.device)
                self._post(key)
            bufs, works = self._posted.pop(key)
            for w in works:
                w.wait()
        return bufs

    def activations(self, c: int, m: int) -> Batch:
        """Micro-batch m's input to chunk c from the stage before; its float tensors require grad."""
        if self.local:
            bufs, meta = self._box.pop(("F", c, m))
            self.in_meta[c] = meta
        else:
            bufs = self._take(("F", c, m))
            for g in self._taken.get((c, m), []):  # the previous stage took these before sending
                for w in self._sends.pop(("B", *g), []):
                    w.wait()
        for b in bufs:
            if b.is_floating_point():
                b.requires_grad_(True)
        return rebuild(bufs, *self.in_meta[c])

    def gradients(self, c: int, m: int) -> list[torch.Tensor]:
        """The gradients of micro-batch m's crossing float outputs of chunk c, from the next stage."""
        if self.local:
            return self._box.pop(("B", c, m))[0]
        grads = self._take(("B", c, m))
        for w in self._sends.pop(("F", c, m), []):  # they arrived: the peer computed this backward
            w.wait()
        return grads

    # ------------------------------------------------------------------ sends
    def send_activations(self, c: int, m: int, y: Batch) -> None:
        ys = as_tuple(y)
        if c not in self.out_meta:
            self.out_meta[c] = describe(ys, aliases=True)
            first = True
        else:
            first = False
        meta = self.out_meta[c]
        if self.local:  # a copy, as a transfer makes: the next chunk's leaves are its own
            copies = [t.detach().clone() for t in wire(ys, meta)]
            self._box[("F", c + 1, m)] = (copies, (meta, isinstance(y, tuple)))
            return
        ch = self.topo.act_out
        assert ch is not None
        held = self._sends.setdefault(("F", c, m), [])
        if first:
            w = ch.send_meta(meta, isinstance(y, tuple), self.device)
            if w is not None:
                held.append(w)
        with self.recorder.span("send", m, c):
            held += ch.isend(wire(ys, meta))

    def send_gradients(self, c: int, m: int, grads: list[torch.Tensor]) -> None:
        """The gradients of chunk c's crossing float inputs for micro-batch m, to the stage before."""
        if self.local:
            self._box[("B", c - 1, m)] = ([g.detach().clone() for g in grads], ([], False))
            return
        ch: Channel | None = self.topo.grad_out
        assert ch is not None
        with self.recorder.span("send", m, c):
            self._sends.setdefault(("B", c, m), []).extend(ch.isend(grads))

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
    def held(self) -> list[tuple[str, int]]:
        """The micro-batches whose sends are not known to be complete, in posting order, as
        (kind, micro-batch) — the chunk left out (see :attr:`held_chunks`)."""
        return [(k, m) for k, _, m in self._sends]

    @property
    def held_chunks(self) -> list[Key]:
        return list(self._sends)
