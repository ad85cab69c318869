"""A discrete-event simulation of one training step of the engine, from per-stage costs.

Each stage executes exactly the engine's action list (``engine.schedule.stage_actions``) with the
engine's semantics (``engine.pipeline.Pipeline._forward`` / ``_backward`` / ``train_step``):

- F(k, m): wait for micro-batch m's activation from stage k-1, forward (``forward_nograd_s`` when m is
  rematerialised, else ``forward_s``), then send the output to stage k+1 without blocking (isend).
- B(k, m): under remat, first recompute the cell (``forward_s`` plus ``recompute_overhead_s``, the
  RNG state restored) *without* waiting for the gradient (GPipe §2.3: the recompute overlaps the
  next stage's backward); then wait for m's gradient from stage k+1 (not on the last stage),
  backward, and send the input gradient to stage k-1.
- Every transfer runs on its own directed link (k -> k+1 for activations, k -> k-1 for gradients),
  one transfer in flight per direction, in issue order: it starts at max(issued, link free) and takes
  ``link.time(bytes)``. Each directed link has a single sender, so issue order is that stage's order.
  Posting a send costs the sender ``link.send_call_s`` (when the send does not occupy it for the whole
  transfer) and posting a receive costs the receiver ``link.recv_call_s``. A receiver that blocked
  waiting sees the message ``link.wake_s(blocked)`` after it arrived (the measured wake-up of a
  blocked thread, which grows with how long it was blocked).
- Ranks that fill one host's cores (``link.shared_s`` > 0, K x replicas >= ``link.cores``): a
  receiver has its message no earlier than ``link.shared_s`` after it posted the receive (the
  backend's threads need a core to take a message in, and a receiver whose core was busy meets its
  message still to be taken in; ``sim.measured.sharing``), so a receiver that waits that long for
  its message anyway pays nothing more. Sends cost nothing more.
- A fixed ``overhead_s`` is added to every F, B and W action (for B, to its backward part).
- At the end a stage waits for its outstanding sends (the engine's final ``send`` span), then pays
  the fixed ``step_overhead_s`` and runs its optimiser step (``update_s``).
- With R > 1 data-parallel replicas (GPipe §2.2: the pipeline is replicated, gradients are summed
  before the synchronous update), each stage all-reduces its gradients (``grad_bytes``) across the R
  copies of itself once its last backward (its last W where split) ends: a ring over the link,
  ``link.allreduce_s``. It
  overlaps nothing of the stage's compute (there is none left) but runs beside its outstanding
  sends; the update waits for both. Every replica runs the same step, so one is simulated.

Whether a send occupies its sender is a switch, ``sender_busy``. gloo on CPU returns from ``isend``
once the send is posted (``link.send_call_s``) and moves the data on its own threads after the
receiver has posted its receive; nccl on CUDA (and a TPU's DMA) runs on a side stream: for all of these
``sender_busy=False`` is the engine's behaviour. ``True`` (the default, kept for the tests' closed
forms) makes the sending stage wait for its transfer — a blocking send, or copy threads that compete
with the stage for its only core. The result carries ``engine.events.Event`` records, so the bubble is
computed by ``engine.events.measured_bubble`` and ``engine.events.chrome_trace`` writes the same
``trace.json`` format as a measured run.

Because each directed link has one sender and each stage runs its actions in order, every start time
is the max of already-known end times (a max-plus system): stages can be advanced in any order
whenever their next dependency is known, and a full pass without progress is a deadlock.

``Replay`` (``replay``) overrides the costs per action and per message (an engine's event log of
one step gives them): the simulator then composes the logged actions by its own rules, so a replay
that does not reproduce the log's timeline means the simulator's rules are not the engine's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..engine.checkpoint import uses_remat
from ..engine.events import Event, busy_time, measured_bubble
from ..engine.schedule import Action, peak_in_flight, splits_backward, stage_actions
from .costs import Link, StageCost
from .replay import Replay

__all__ = ["SimResult", "ScheduleDeadlock", "simulate"]


class ScheduleDeadlock(RuntimeError):
    """A schedule stopped progressing: some stage waits for something no stage will produce."""


@dataclass
class SimResult:
    """One simulated training step (times in seconds from the step's start)."""

    step_s: float  # the latest stage end, optimiser step included
    busy_s: list[float]  # per stage: forward + backward + recompute
    bubble_fraction: float  # engine.events.measured_bubble on the simulated events
    peak_in_flight: list[int]  # per stage: micro-batches forwarded whose backward has not finished
    events: list[Event] = field(repr=False)
    span_s: float = 0.0  # first to last computation (the span measured_bubble uses)
    stage_end_s: list[float] = field(default_factory=list)
    recompute_s: list[float] = field(default_factory=list)  # per stage: its recompute alone


@dataclass
class _Stage:
    k: int
    actions: list[Action]
    pos: int = 0
    free: float = 0.0  # when the stage's thread is next free
    last_send_end: float = 0.0
    last_backward_end: float = 0.0


Key = tuple[str, int, int]  # a message: ("F", receiving cell, mb) or ("B", receiving cell, mb)


def _check(stages: Sequence[StageCost], overhead_s: float) -> None:
    if overhead_s < 0:
        raise ValueError(f"overhead_s={overhead_s} is invalid; allowed: a number >= 0")
    for k, s in enumerate(stages):
        for name in ("forward_s", "forward_nograd_s", "backward_s", "update_s", "out_bytes"):
            v = getattr(s, name)
            if not v >= 0:  # also rejects NaN
                raise ValueError(f"stages[{k}].{name}={v} is invalid; allowed: a number >= 0")


def simulate(
    K: int,
    M: int,
    schedule: str,
    checkpoint: str | Sequence[str],
    stages: Sequence[StageCost],
    link: Link,
    overhead_s: float = 0.0,
    *,
    sender_busy: bool = True,
    step_overhead_s: float = 0.0,
    lookahead: int | None = None,
    recompute_overhead_s: float = 0.0,
    replay: Replay | None = None,
    replicas: int = 1,
    grad_bytes: Sequence[int] = (),
    virtual_stages: int = 1,
) -> SimResult:
    """Simulate one training step of ``K`` stages and ``M`` micro-batches (see the module doc).

    ``checkpoint``: one remat mode for every stage, or one per stage (a list of K).
    ``stages[s]`` holds model cell s's costs per micro-batch (K·v cells with ``virtual_stages`` v,
    cell s on stage s mod K); ``stages[s].out_bytes`` is both the activation sent to s+1 and the
    gradient sent back from s+1. ``sender_busy``: a send occupies the
    sending stage for its transfer (gloo on CPU, the default) or overlaps with compute (nccl).
    ``step_overhead_s``: a fixed cost per step on every stage (the loss sum, the optimiser call),
    spent after its last send and before its ``update_s`` (measured: each layer's BatchNorm commit is
    in its ``update_s``). ``lookahead``: with
    ``sender_busy=False``, a transfer starts only once its receiver has posted the receive, which the
    engine does at the start of the action ``lookahead - 1`` actions earlier (``Pipeline(lookahead=4)``,
    gloo's rendezvous); None: receives are always posted. ``recompute_overhead_s``: a recompute's
    fixed cost beyond its forward (restoring the RNG state). ``replay``: per-action and
    per-message costs replacing these where given (``Replay``). ``replicas``: data-parallel copies
    of the pipeline; with more than one, ``grad_bytes[k]`` (stage k's gradient bytes, its cells
    together) is all-reduced after stage k's last backward or W (module doc). ``link.shared_s``: the
    ranks share ``link.cores`` cores of one host; where they fill them (K x replicas >=
    ``link.cores``), a receiver has its message no earlier than that after posting the receive
    (module doc): a receiver that would wait that long anyway pays nothing more.
    """
    if not (link.shared_s >= 0 and (link.shared_s == 0 or link.cores >= 1)):
        raise ValueError(
            f"link.shared_s={link.shared_s}, link.cores={link.cores} are invalid; allowed: "
            "shared_s >= 0, and cores >= 1 where shared_s > 0"
        )
    return _simulate(
        K, M, schedule, checkpoint, stages, overhead_s, sender_busy, step_overhead_s, link,
        lookahead, recompute_overhead_s, replay, replicas, grad_bytes, virtual_stages,
    )  # fmt: skip


def _simulate(
    K: int,
    M: int,
    schedule: str,
    checkpoint: str | Sequence[str],
    stages: Sequence[StageCost],
    overhead_s: float,
    sender_busy: bool,
    step_overhead_s: float,
    link: Link,
    lookahead: int | None,
    recompute_overhead_s: float,
    replay: Replay | None,
    replicas: int,
    grad_bytes: Sequence[int],
    virtual_stages: int,
) -> SimResult:
    """``simulate``'s step, its arguments checked."""
    v = virtual_stages
    S = K * v
    split = splits_backward(schedule)
    modes = [checkpoint] * K if isinstance(checkpoint, str) else list(checkpoint)
    if len(modes) != K:
        raise ValueError(
            f"checkpoint has {len(modes)} modes; allowed: one mode, or one per stage (K={K})"
        )
    for mode in modes:
        uses_remat(mode, 0, M)  # validates the mode
    acts = [stage_actions(schedule, K, M, k, v) for k in range(K)]  # validates schedule, K, M, v
    if len(stages) != S:
        raise ValueError(
            f"stages has {len(stages)} entries; allowed: exactly K={K}, one per stage"
            if v == 1
            else f"stages has {len(stages)} entries; allowed: exactly K*v={S}, one per model cell"
        )
    _check(stages, overhead_s)
    if not step_overhead_s >= 0:
        raise ValueError(f"step_overhead_s={step_overhead_s} is invalid; allowed: a number >= 0")
    if not recompute_overhead_s >= 0:
        raise ValueError(
            f"recompute_overhead_s={recompute_overhead_s} is invalid; allowed: a number >= 0"
        )
    if not (isinstance(replicas, int) and replicas >= 1):
        raise ValueError(f"replicas={replicas!r} is invalid; allowed: an integer >= 1")
    if replicas > 1 and len(grad_bytes) != K:
        raise ValueError(
            f"grad_bytes has {len(grad_bytes)} entries with replicas={replicas}; allowed: exactly "
            f"K={K}, each stage's gradient bytes"
        )
    if any(not b >= 0 for b in grad_bytes):
        raise ValueError(f"grad_bytes={list(grad_bytes)} is invalid; allowed: numbers >= 0")
    if lookahead is not None and lookahead < 1:
        raise ValueError(f"lookahead={lookahead} is invalid; allowed: None or an integer >= 1")
    st = [_Stage(k, acts[k]) for k in range(K)]
    events: list[Event] = []
    # arrival time of micro-batch m's activation at cell s ("F", s, m) / gradient ("B", s, m)
    arrival: dict[tuple[str, int, int], float] = {}
    # sends posted but not yet timed (the transfer's start needs the receiver's post): key -> (ready,
    # bytes, sender); timed in consumption order, which on every channel is the issue order
    issued: dict[tuple[str, int, int], tuple[float, int, int]] = {}
    starts: list[list[float]] = [[] for _ in range(K)]  # when each stage began each of its actions
    rp = replay or Replay()

    def transit(key: tuple[str, int, int], nbytes: int) -> float:
        return rp.transit.get(key, link.time(nbytes))

    def compute(action: str, g: int, mb: int, default: float) -> float:
        return rp.compute.get((action, g, mb), default)

    # a channel: (sender, receiver, kind); one transfer at a time each, in issue order
    link_free: dict[tuple[int, int, str], float] = {}

    # for the cores the ranks fill: the least time from posting a receive to its message being
    # taken in (module doc)
    receive_s = link.shared_s if link.shared_s > 0 and K * replicas >= max(2, link.cores) else 0.0

    def ev(action: str, mb: int, start: float, end: float, k: int, chunk: int = 0) -> None:
        events.append(Event(action, mb, start, end, stage=k, chunk=chunk))

    def send(
        s: _Stage, dst: int, nbytes: int, mb: int, key: tuple[str, int, int], chunk: int
    ) -> None:
        if K == 1:  # cells of one stage hand over in the process
            arrival[key] = s.free
            return
        posted = s.free
        if not sender_busy:  # posting the send; the transfer starts once it is posted
            s.free += link.send_call_s
        ready = s.free
        if not sender_busy:  # an isend that returns after posting; the link carries it later
            ev("send", mb, posted, ready, s.k, chunk)
            issued[key] = (ready, nbytes, s.k)
            return
        channel = (s.k, dst, key[0])
        start = max(ready, link_free.get(channel, 0.0))
        end = start + transit(key, nbytes)
        link_free[channel] = end
        arrival[key] = end
        s.last_send_end = max(s.last_send_end, end)
        ev("send", mb, ready, end, s.k, chunk)  # the sending thread is busy until the transfer ends
        s.free = end

    def arrive(s: _Stage, key: tuple[str, int, int]) -> float:
        """When ``key`` reaches stage s, which is at its action ``s.pos`` (whose start is recorded)."""
        if key not in arrival:
            ready, nbytes, src = issued.pop(key)
            channel = (src, s.k, key[0])
            posted = 0.0 if lookahead is None else starts[s.k][max(0, s.pos - lookahead + 1)]
            start = max(ready, posted, link_free.get(channel, 0.0))
            if key in rp.transit:  # a logged transit already holds any queueing behind others
                start = ready
            arrival[key] = start + transit(key, nbytes)
            link_free[channel] = arrival[key]
            st[src].last_send_end = max(st[src].last_send_end, arrival[key])
        return arrival[key]

    def wait(s: _Stage, mb: int, key: tuple[str, int, int], chunk: int) -> None:
        if K == 1:  # in the process: nothing to receive
            return
        # posting the receive (the engine posts ahead; same cost)
        s.free += link.recv_call_s
        arrived = arrive(s, key)
        blocked = arrived - s.free
        # the message is taken in at the earliest receive_s after the receive was posted
        t = max(
            s.free + receive_s,
            arrived + link.wake_s(blocked) if blocked > 0 and key not in rp.transit else arrived,
        )
        ev("wait", mb, s.free, t, s.k, chunk)
        s.free = t

    def step(s: _Stage) -> bool:
        """Run stage s's next action if its input is there; False when it must wait."""
        k, a = s.k, s.actions[s.pos]
        c, g = a.chunk, a.chunk * K + k  # the stage's cell and the model cell it is
        remat = uses_remat(modes[k], a.mb, M)
        cost = stages[g]
        if a.kind == "F":
            key = ("F", g, a.mb)
            if g > 0 and key not in arrival and key not in issued:
                return False
            starts[k].append(s.free)
            s.free += rp.before.get((k, s.pos), 0.0)
            if g > 0:
                wait(s, a.mb, key, c)
            dur = compute(
                "forward",
                g,
                a.mb,
                (cost.forward_nograd_s if remat else cost.forward_s) + overhead_s,
            )
            ev("forward", a.mb, s.free, s.free + dur, k, c)
            s.free += dur
            if g < S - 1:
                send(s, (k + 1) % K, cost.out_bytes, a.mb, ("F", g + 1, a.mb), c)
        elif a.kind == "W":
            starts[k].append(s.free)
            s.free += rp.before.get((k, s.pos), 0.0)
            # the model's first cell runs its whole split backward here, B's passes and W's (its B
            # only took the gradient: ``engine.pipeline``), its recompute first
            whole = sum(cost.split) + (cost.recompute + recompute_overhead_s if remat else 0.0)
            dur = compute("weight", g, a.mb, (whole if g == 0 else cost.split[1]) + overhead_s)
            ev("weight", a.mb, s.free, s.free + dur, k, c)
            s.free += dur
            s.last_backward_end = s.free
        else:
            key = ("B", g, a.mb)
            if g < S - 1 and key not in arrival and key not in issued:
                return False  # the recompute's timing does not depend on when we get here
            starts[k].append(s.free)
            s.free += rp.before.get((k, s.pos), 0.0)
            first_split = split and g == 0  # nothing of it on the critical path: all in W
            if remat and not first_split:  # recompute before the gradient arrives (§2.3)
                dur = compute("recompute", g, a.mb, cost.recompute + recompute_overhead_s)
                ev("recompute", a.mb, s.free, s.free + dur, k, c)
                s.free += dur
            if g < S - 1:
                wait(s, a.mb, key, c)
            backward = 0.0 if first_split else cost.split[0] if split else cost.backward_s
            dur = compute("backward", g, a.mb, backward + overhead_s)
            if not first_split:  # which only takes its gradient: no computing span (the engine's)
                ev("backward", a.mb, s.free, s.free + dur, k, c)
            s.free += dur
            if not split:
                s.last_backward_end = s.free
            if g > 0:
                send(s, (k - 1) % K, stages[g - 1].out_bytes, a.mb, ("B", g - 1, a.mb), c)
        s.pos += 1
        return True

    remaining = sum(len(a) for a in acts)
    while remaining:
        progressed = False
        for s in st:
            while s.pos < len(s.actions) and step(s):
                remaining -= 1
                progressed = True
        if not progressed:
            s = next(s for s in st if s.pos < len(s.actions))
            a = s.actions[s.pos]
            g = a.chunk * K + s.k
            src = f"cell {g - 1}" if a.kind == "F" else f"cell {g + 1}"
            raise ScheduleDeadlock(
                f"schedule {schedule!r} deadlocks at K={K}, M={M}: stage {s.k} is blocked at {a} "
                f"(action {s.pos} of {len(s.actions)}), waiting for micro-batch {a.mb} from {src}"
            )

    ends = []
    for s in st:
        done = max(s.free, s.last_send_end)
        ev("send", -1, s.free, done, s.k)  # the engine's final wait for outstanding sends
        if replicas > 1:
            reduced = s.last_backward_end + link.allreduce_s(grad_bytes[s.k], replicas)
            ev("allreduce", -1, s.last_backward_end, reduced, s.k)
            done = max(done, reduced)
        ev("step", -1, 0.0, done, s.k)
        update = sum(stages[g].update_s for g in range(s.k, S, K))
        ev("update", -1, done, done + step_overhead_s + update, s.k)
        ends.append(done + step_overhead_s + update)
    span, bubble, busy = measured_bubble(events, K)
    return SimResult(
        step_s=max(ends),
        busy_s=busy,
        bubble_fraction=bubble,
        peak_in_flight=[peak_in_flight(schedule, K, M, k, v) for k in range(K)],
        events=events,
        span_s=span,
        stage_end_s=ends,
        recompute_s=[
            busy_time(e for e in events if (e.stage, e.action) == (k, "recompute"))
            for k in range(K)
        ],
    )
