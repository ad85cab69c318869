"""A logged step's costs, action by action, for the simulator to compose by its own rules.

``Replay.from_events`` reads one step of the engine's ``Event`` spans (every stage's) into the cost of
each action, what each stage spends before each action, and each message's transit; ``simulate``
given a ``Replay`` uses them in place of the stage costs. A replay that does not reproduce the log's
timeline means the simulator's rules are not the engine's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..engine.checkpoint import uses_remat
from ..engine.events import Event
from ..engine.schedule import splits_backward, stage_actions

__all__ = ["Replay"]


@dataclass(frozen=True)
class Replay:
    """Per-action and per-message costs that replace the stage costs where given (seconds).

    ``compute[(action, s, mb)]``: a forward, recompute, backward or weight of model cell s (the
    stage's index with one cell per stage) on micro-batch mb, overheads included;
    ``before[(k, i)]``: what stage k spends before its i-th action beyond its dependencies
    (bookkeeping, posting transfers); ``transit[(kind, s, mb)]``: from the send of the activation
    (kind F) or gradient (kind B) that cell s receives for mb to its arrival."""

    compute: dict[tuple[str, int, int], float] = field(default_factory=dict)
    before: dict[tuple[int, int], float] = field(default_factory=dict)
    transit: dict[tuple[str, int, int], float] = field(default_factory=dict)

    @classmethod
    def from_events(
        cls,
        events: Sequence[Event],
        K: int,
        M: int,
        schedule: str,
        checkpoint: str,
        virtual_stages: int = 1,
    ) -> tuple[Replay, float]:
        """The costs of one logged step (the engine's ``Event`` spans of every stage), and the
        time its replay starts at (the earliest event). Per action: the time before its first span
        (the previous action's send, bookkeeping) is ``before``; its compute runs from the end of
        its wait (or its first span) to the end of its compute span; a message's transit runs from
        the end of its sender's compute to the end of its receiver's wait."""
        v = virtual_stages
        S = K * v
        t0 = min(e.start for e in events)
        rp = cls()
        done: dict[tuple[str, int, int], float] = {}  # (kind, receiving cell, mb) -> sent at
        waited: dict[tuple[str, int, int], float] = {}
        for k in range(K):
            mine = sorted((e for e in events if e.stage == k), key=lambda e: e.start)
            spans: dict[tuple[str, int, int], Event] = {(e.action, e.chunk, e.mb): e for e in mine}

            def waits_of(c: int, mb: int, mine: list[Event] = mine) -> list[Event]:
                return [e for e in mine if e.action == "wait" and e.mb == mb and e.chunk == c]

            prev = t0
            for i, a in enumerate(stage_actions(schedule, K, M, k, v)):
                g = a.chunk * K + k  # the model cell
                remote = K > 1
                if a.kind == "F":
                    fwd = spans[("forward", a.chunk, a.mb)]
                    wait = waits_of(a.chunk, a.mb)[0] if g > 0 and remote else None
                    first = wait or fwd
                    rp.before[(k, i)] = first.start - prev
                    rp.compute[("forward", g, a.mb)] = fwd.end - (wait.end if wait else fwd.start)
                    if wait:
                        waited[("F", g, a.mb)] = wait.end
                    if g < S - 1:
                        done[("F", g + 1, a.mb)] = fwd.end
                    prev = fwd.end
                elif a.kind == "W":
                    w = spans[("weight", a.chunk, a.mb)]
                    rp.before[(k, i)] = w.start - prev
                    rp.compute[("weight", g, a.mb)] = w.end - w.start
                    prev = w.end
                elif splits_backward(schedule) and g == 0:  # only takes its gradient: no span
                    wait = waits_of(a.chunk, a.mb)[-1] if g < S - 1 and remote else None
                    if wait:
                        rp.before[(k, i)] = wait.start - prev
                        waited[("B", g, a.mb)] = prev = wait.end
                    rp.compute[("backward", g, a.mb)] = 0.0
                else:
                    bwd = spans[("backward", a.chunk, a.mb)]
                    rec = (
                        spans.get(("recompute", a.chunk, a.mb))
                        if uses_remat(checkpoint, a.mb, M)
                        else None
                    )
                    wait = waits_of(a.chunk, a.mb)[-1] if g < S - 1 and remote else None
                    first = rec or wait or bwd
                    rp.before[(k, i)] = first.start - prev
                    if rec:  # its own span: the clock reads its end apart from the next start
                        rp.compute[("recompute", g, a.mb)] = rec.end - rec.start
                    # the backward runs from its wait's end, else from the recompute's end (the gap
                    # between two spans is bookkeeping of this action), else from its own start
                    begin = wait.end if wait else rec.end if rec else bwd.start
                    rp.compute[("backward", g, a.mb)] = bwd.end - begin
                    if wait:
                        waited[("B", g, a.mb)] = wait.end
                    if g > 0:
                        done[("B", g - 1, a.mb)] = bwd.end
                    prev = bwd.end
        rp.transit.update(
            {key: max(0.0, waited[key] - sent) for key, sent in done.items() if key in waited}
        )
        return rp, t0
