"""Is a message cheaper to ranks sharing the cores when traffic flows both ways? A diagnostic.

    python bench/sharing_directions.py [--rounds 5] [--M 8 32] [--work-ms 1.0] [--json out.json]

``bench/sharing_schedules.py`` fits what a message costs two ranks that keep both cores busy, per
schedule. Charged to the messages posted while the other rank computed (the simulator's rule until
issue #39), interleaved 1F1B's came out far cheaper each than gpipe's and 1f1b's, and
``bench/sharing_gap.py`` showed that gpipe's cost per message hardly moves with the work between
messages, so the message rate alone did not explain it. What else differs at v = 2 is that each
rank sends and receives in every phase, so both ranks' gloo threads carry traffic at once, where a
gpipe phase sends one way only. This bench measures that difference directly, with no simulator.

This separates the two with K = 2 processes that spin a known time per action and post messages
with plain ``torch.distributed`` calls (no engine, no simulator): a gpipe-like step, every forward
action then every backward one, one ``--work-ms`` spin each, the pipeline's message after each
action (sent without blocking, received blocking by the action that needs it). Variants (``plan``):

- ``base``: the pipeline's messages only (one per action of the sending rank);
- ``same``: one more message after each sending action, the same way (received without blocking,
  waited at the end of the phase): twice the messages, all one way;
- ``both``: one more message after each receiving action, back the other way (received as in
  ``same``): the same number of messages as ``same``, half of them flowing back;
- ``alone``: each rank spins its 2·M actions with no message at all (the step's compute alone).

Each launch of fresh ranks runs every variant at every M (``--rounds`` launches, the variants'
order reversed on every other one); a variant's step is the median over its timed steps of the
slower rank's, and its rounds' median is printed. The extra cost per extra message is (variant −
base) / 2M. If ``both`` costs clearly less per extra message than ``same``, two-way traffic is what
makes interleaved's messages cheaper; if they cost the same, it is not. Nothing here is used by the
simulator. Run it on an idle machine, under the CPU lock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from gpipe_repro.engine import init_topology
from gpipe_repro.engine.launch import launch

VARIANTS = ("base", "same", "both", "alone")
SHAPE = (4, 256)  # floats per message: 4 KiB
WARMUP, STEPS = 2, 8
EXTRA = 1 << 16  # tags of the extra messages start here

# One operation of a rank's step: ("spin",), ("send", peer, tag), ("recv", peer, tag) (blocking),
# ("irecv", peer, tag) (posted now, waited at the end of its phase), ("wait",) (the phase's end).
Op = tuple[Any, ...]


def plan(variant: str, M: int, rank: int) -> list[Op]:
    """Rank 0 or 1's step in ``variant`` at M micro-batches (module doc): the forward phase (rank 0
    sends to rank 1), then the backward phase (rank 1 sends to rank 0)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r} is invalid; allowed: {', '.join(VARIANTS)}")
    ops: list[Op] = []
    for phase, sender in enumerate((0, 1)):
        peer = 1 - rank
        tag0 = phase * M
        if variant == "alone":
            ops += [("spin",)] * M
            continue
        extra_in = (variant == "same" and rank != sender) or (variant == "both" and rank == sender)
        if extra_in:  # the extra messages this rank receives, posted up front
            ops += [("irecv", peer, EXTRA + tag0 + m) for m in range(M)]
        for m in range(M):
            if rank == sender:
                ops += [("spin",), ("send", peer, tag0 + m)]
                if variant == "same":
                    ops.append(("send", peer, EXTRA + tag0 + m))
            else:
                ops += [("recv", peer, tag0 + m), ("spin",)]
                if variant == "both":
                    ops.append(("send", peer, EXTRA + tag0 + m))
        ops.append(("wait",))
    return ops


def _spin(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def _step(ops: list[Op], work_s: float) -> float:
    """Run one step's operations; its seconds on this rank."""
    payload = torch.ones(*SHAPE)
    pending: list[Any] = []
    t0 = time.perf_counter()
    for op in ops:
        if op[0] == "spin":
            _spin(work_s)
        elif op[0] == "send":
            pending.append(dist.isend(payload, op[1], tag=op[2]))
        elif op[0] == "recv":
            dist.recv(torch.empty(*SHAPE), op[1], tag=op[2])
        elif op[0] == "irecv":
            pending.append(dist.irecv(torch.empty(*SHAPE), op[1], tag=op[2]))
        else:  # the phase's end: every send and extra receive done
            for r in pending:
                r.wait()
            pending = []
    return time.perf_counter() - t0


def _rank(Ms: list[int], work_s: float, order: list[str]) -> dict[str, list[float]]:
    """One rank: per variant and M, its timed steps' seconds."""
    topo = init_topology(2, timeout_s=120.0)
    torch.set_num_threads(1)
    out: dict[str, list[float]] = {}
    for variant in order:
        for M in Ms:
            ops = plan(variant, M, topo.stage)
            times = [_step(ops, work_s) for _ in range(WARMUP + STEPS)]
            out[_key(variant, M)] = times[WARMUP:]
    return out


def _key(variant: str, M: int) -> str:
    return f"{variant} M={M}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="launches of fresh ranks")
    ap.add_argument("--M", type=int, nargs="+", default=[8, 32], help="micro-batches per step")
    ap.add_argument("--work-ms", type=float, default=1.0, help="spin per action, ms")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    for name, value, ok, allowed in (
        ("--rounds", a.rounds, a.rounds >= 1, ">= 1"),
        ("--M", a.M, all(m >= 1 for m in a.M), "integers >= 1"),
        ("--work-ms", a.work_ms, a.work_ms > 0, "a number > 0"),
    ):
        if not ok:
            print(f"sharing_directions: error: {name}={value}; allowed: {allowed}", file=sys.stderr)
            return 2
    steps: dict[str, list[float]] = {}  # per variant and M: each round's median step (slower rank)
    for r in range(a.rounds):
        order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
        per_rank = launch(_rank, 2, (a.M, a.work_ms * 1e-3, order), threads=1)
        for key, t0 in per_rank[0].items():
            steps.setdefault(key, []).append(
                statistics.median(max(p, q) for p, q in zip(t0, per_rank[1][key]))
            )
    print(f"spin {a.work_ms} ms per action, {a.rounds} launches; step: median of rounds")
    print("variant | M | step ms | extra messages | ms per extra message (vs base)")
    rows = []
    for M in a.M:
        base = statistics.median(steps[_key("base", M)])
        for variant in VARIANTS:
            step = statistics.median(steps[_key(variant, M)])
            extra = 2 * M if variant in ("same", "both") else 0
            per = (step - base) / extra if extra else None
            print(
                f"{variant} | {M} | {step * 1e3:.2f} | {extra} | "
                + ("—" if per is None else f"{per * 1e3:.3f}")
            )
            rows.append(
                {"variant": variant, "M": M, "work_s": a.work_ms * 1e-3, "step_s": step,
                 "rounds_s": steps[_key(variant, M)], "extra_messages": extra,
                 "per_extra_message_s": per}
            )  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
