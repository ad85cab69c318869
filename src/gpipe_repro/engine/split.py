"""A backward split in two: B, the input gradient (on the pipeline's critical path), and W, the weight
gradient (deferred into the bubble) — zero bubble's passes (Qi et al., ICLR 2024, §2).

Autograd computes one node's gradients for the inputs it is asked for and nothing else. So B asks
for the gradient of each layer's input only (``torch.autograd.grad`` with ``retain_graph``): the
nodes on a path from the outputs to an input run, each computing only the gradients that lead
there; the gradient arriving at each node that also feeds a parameter is kept (a pre-hook). W then
runs those nodes again from the kept gradients, asking for the parameters only
(``torch.autograd.backward(inputs=...)``, which accumulates into ``.grad`` as a plain backward does,
so DDP's hooks fire). Nothing of B is computed twice. The idea is ``torch.distributed.pipelining``'s
``stage_backward_input`` / ``stage_backward_weight``; this is our own, per layer.

Per layer, not per stage: a ``Tape`` cuts the graph at every layer boundary (each layer's input is
a fresh leaf), so every node sees the same request in B and in W whatever K and the stage
boundaries are — the first stage's first layer (whose input needs no gradient) leaves all its work
to W at every K — and the update is bit-identical across K for this schedule. (Against a whole
backward the gradients agree to rounding only: a tensor used by two layers sums its gradients in
another order.)

What W keeps alive between B and W: the micro-batch's whole graph — autograd frees a retained
graph's saved tensors only when its nodes run without ``retain_graph`` (in W) or the graph dies —
plus the gradient kept at every node feeding a parameter (about that node's output, e.g. a linear
layer's output gradient). The layer inputs and outputs themselves are dropped after B.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, Node

from .microbatch import Batch, as_tuple, from_tuple

__all__ = ["Tape", "cut", "backward_input", "backward_weight"]


def cut(y: Batch) -> Batch:
    """``y`` with every float tensor that needs a gradient replaced by a fresh leaf (the same leaf
    where ``y`` holds one tensor twice); other tensors pass as they are."""
    seen: dict[int, torch.Tensor] = {}
    out = []
    for t in as_tuple(y):
        if id(t) not in seen:
            seen[id(t)] = t.detach().requires_grad_() if t.requires_grad else t
        out.append(seen[id(t)])
    return from_tuple(out, isinstance(y, tuple))


def distinct_grad(ts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The distinct tensors of ``ts`` that need a gradient, in order."""
    seen: set[int] = set()
    out = []
    for t in ts:
        if t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


@dataclass
class _Group:
    """Parameters W reaches from one set of kept gradients (roots) through nodes of their own."""

    params: list[torch.Tensor]
    roots: list[GradientEdge]
    grads: list[torch.Tensor]
    clamp: list[
        tuple[Node, tuple[torch.Tensor | None, ...]]
    ]  # kept gradients that W must not add to


@dataclass
class Tape:
    """One micro-batch's forward through a cell, layer by layer: ``ins[j]`` is layer j's input
    (after the first, a cut of layer j-1's output), ``outs[j]`` its output. B fills ``work``; W
    consumes it."""

    ins: list[Batch] = field(default_factory=list)
    outs: list[Batch] = field(default_factory=list)
    work: list[list[_Group]] = field(default_factory=list)

    def record(self, x: Batch, y: Batch) -> Batch:
        """Layer ``len(ins)`` read ``x`` and returned ``y``; returns the next layer's input."""
        self.ins.append(x)
        self.outs.append(y)
        return cut(y)

    def nbytes_kept(self) -> int:
        """Bytes of the gradients B kept for W."""
        seen: set[int] = set()
        total = 0
        for groups in self.work:
            for g in groups:
                for t in g.grads:
                    if id(t) not in seen:
                        seen.add(id(t))
                        total += t.numel() * t.element_size()
        return total

    def kept(self) -> Iterator[torch.Tensor]:
        for groups in self.work:
            for g in groups:
                yield from g.grads


def _node(t: torch.Tensor) -> Node:
    """``t``'s gradient function, or the accumulator of a leaf."""
    if t.grad_fn is not None:
        return t.grad_fn
    fn = t.view_as(t).grad_fn
    assert fn is not None, "a leaf that needs a gradient has an accumulator"
    acc = fn.next_functions[0][0]
    assert acc is not None
    return acc


def _analyse(
    outs: Sequence[torch.Tensor],
    grads: Sequence[torch.Tensor | None],
    ins: Sequence[torch.Tensor],
    params: dict[int, torch.Tensor],
) -> tuple[list[list[Node]], list[_Group]]:
    """The anchors of each parameter group (the nodes where W starts) and the groups, W's roots
    filled for the anchors that are outputs; the kept gradients are added by B's pre-hooks."""
    roots = [_node(t) for t in outs]
    consumers: dict[Node, list[Node]] = defaultdict(list)
    accumulators: dict[Node, torch.Tensor] = {}
    seen: set[Node] = set(roots)
    queue = deque(roots)
    while queue:
        n = queue.popleft()
        var = getattr(n, "variable", None)
        if var is not None and id(var) in params:
            accumulators[n] = var
        for nxt, _ in n.next_functions:
            if nxt is None:
                continue
            consumers[nxt].append(n)
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    # B runs exactly the nodes with a path to an input's accumulator
    closure: set[Node] = set()
    queue = deque(_node(t) for t in ins)
    while queue:
        for c in consumers[queue.popleft()]:
            if c not in closure:
                closure.add(c)
                queue.append(c)
    # from each parameter, walk towards the outputs until B's nodes (or an output): its anchors
    root_set = set(roots)
    anchors_of: list[tuple[torch.Tensor, set[Node]]] = []
    for acc, p in accumulators.items():
        found: set[Node] = set()
        walked: set[Node] = {acc}
        queue = deque([acc])
        while queue:
            n = queue.popleft()
            if n in root_set and n not in closure:
                found.add(n)
            for c in consumers[n]:
                if c in closure:
                    found.add(c)
                elif c not in walked:
                    walked.add(c)
                    queue.append(c)
        if found:
            anchors_of.append((p, found))
    # parameters sharing an anchor form one group (one W call each: no path between groups)
    parent = list(range(len(anchors_of)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[Node, int] = {}
    for i, (_, found) in enumerate(anchors_of):
        for n in found:
            if n in owner:
                parent[find(i)] = find(owner[n])
            else:
                owner[n] = i
    members: dict[int, list[int]] = defaultdict(list)
    for i in range(len(anchors_of)):
        members[find(i)].append(i)
    groups: list[_Group] = []
    anchors: list[list[Node]] = []
    for idx in members.values():
        nodes = sorted({n for i in idx for n in anchors_of[i][1]}, key=lambda n: n._sequence_nr())
        group = _Group([anchors_of[i][0] for i in idx], [], [], [])
        for t, g in zip(outs, grads):  # output anchors outside B: their gradient is the given one
            n = _node(t)
            if n in nodes and n not in closure:
                group.roots.append(GradientEdge(n, t.output_nr))
                group.grads.append(g if g is not None else torch.ones_like(t))
        groups.append(group)
        anchors.append([n for n in nodes if n in closure])
    return anchors, groups


def backward_input(
    tape: Tape,
    out_grads: Sequence[torch.Tensor | None],
    outs: Sequence[torch.Tensor],
    params: Sequence[torch.Tensor],
) -> list[torch.Tensor | None]:
    """B: from the gradients ``out_grads`` of the cell's outputs ``outs`` (the loss with None),
    the gradients of the cell's input tensors that need one (``as_tuple(tape.ins[0])``'s distinct
    ones, None where none flows), layer by layer, keeping what W needs in ``tape.work``."""
    pmap = {id(p): p for p in params}
    n = len(tape.ins)
    tape.work = [[] for _ in range(n)]
    # the gradient of each tensor of the next layer's input, by the identity of the output it cuts
    given: dict[int, torch.Tensor | None] = {id(t): g for t, g in zip(outs, out_grads)}
    last_outs: list[torch.Tensor] = list(outs)
    ins0: list[torch.Tensor] = []
    for j in reversed(range(n)):
        if j == n - 1:
            ys = last_outs
        else:
            nxt_in, y = as_tuple(tape.ins[j + 1]), as_tuple(tape.outs[j])
            leaves = {id(a): b for a, b in zip(y, nxt_in)}
            ys = [t for t in distinct_grad(y) if given.get(id(leaves[id(t)])) is not None]
            given = {id(t): given[id(leaves[id(t)])] for t in ys}
        gs = [given.get(id(t)) for t in ys]
        xs = distinct_grad(as_tuple(tape.ins[j]))
        if j == 0:
            ins0 = xs
        if not ys:
            given = {}
            continue
        anchors, groups = _analyse(ys, gs, xs, pmap)
        kept: dict[Node, tuple[torch.Tensor | None, ...]] = {}
        handles = []
        for nodes in anchors:
            for node in nodes:

                def keep(
                    grad_out: tuple[torch.Tensor | None, ...],
                    node: Node = node,
                    kept: dict[Node, tuple[torch.Tensor | None, ...]] = kept,
                ) -> None:
                    kept[node] = grad_out

                handles.append(node.register_prehook(keep))
        try:
            got = (
                torch.autograd.grad(ys, xs, gs, retain_graph=True, allow_unused=True) if xs else ()
            )
        finally:
            for h in handles:
                h.remove()
        for group, nodes in zip(groups, anchors):
            for node in nodes:
                g_out = kept.get(node, ())
                for i, g in enumerate(g_out):
                    if g is not None:
                        group.roots.append(GradientEdge(node, i))
                        group.grads.append(g)
                if len(nodes) > 1 and g_out:
                    group.clamp.append((node, g_out))
        tape.work[j] = [g for g in groups if g.roots]
        given = {id(x): g for x, g in zip(xs, got)}
    tape.ins, tape.outs = [], []  # W needs the graph and the kept gradients, not the tensors
    return [given.get(id(x)) for x in ins0]


def backward_weight(tape: Tape) -> None:
    """W: accumulate every parameter's gradient from what B kept, one autograd call per group; the
    graph is freed as it goes."""
    for groups in tape.work:
        for g in groups:
            handles = [node.register_prehook(lambda _, kept=kept: kept) for node, kept in g.clamp]
            try:
                torch.autograd.backward(g.roots, g.grads, inputs=g.params)
            finally:
                for h in handles:
                    h.remove()
    tape.work = []
