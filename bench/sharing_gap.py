"""Does a message cost ranks sharing the cores the same whatever the work between messages? A diagnostic.

    python bench/sharing_gap.py [--calibration reports/sim/calibration.json] [--rounds 3]

The simulator charges every receive of ranks that fill this host's cores one constant,
``shared_message_s`` (``sim/measured/sharing.py``:
real K = 2 steps of stages spinning 1 ms per action at M = 2 and 32, the cost whose simulated
steps leave the measured ones a residual that does not grow with M). This runs the same
measurement (``measure_sharing``) with other action lengths and message sizes, on the link and
overheads of a committed calibration, and prints the fitted cost per message and what it leaves
of each M's step: if the cost were one constant, every row would give the same cost and a flat
residual. Nothing here is used by the simulator. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpipe_repro.sim.costs import Link
from gpipe_repro.sim.measured.sharing import measure_sharing

ACTION_MS = (0.25, 1.0, 4.0)  # spin per forward and per backward action
SHAPES = ((4, 256), (64, 1024))  # floats per micro-batch's message: 4 KiB, 256 KiB
MS = (2, 8, 32)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibration", type=Path, default=Path("reports/sim/calibration.json"))
    ap.add_argument("--rounds", type=int, default=3, help="launches of fresh ranks per setting")
    a = ap.parse_args(argv)
    try:
        dev = json.loads(a.calibration.read_text())["device"]
    except (OSError, ValueError, KeyError) as e:
        print(f"sharing_gap: error: --calibration {a.calibration}: {e}", file=sys.stderr)
        return 2
    if a.rounds < 1:
        print(f"sharing_gap: error: --rounds={a.rounds}; allowed: >= 1", file=sys.stderr)
        return 2
    link = Link(**{**dev["link"], "wake": tuple(tuple(p) for p in dev["link"].get("wake", ()))})
    print(f"committed shared_message_s: {dev['shared_message_s'] * 1e3:.3f} ms ({a.calibration})")
    print("action ms | message KiB | fitted ms/message | measured - simulated ms/step at M = "
          + ", ".join(map(str, MS)))  # fmt: skip
    for action in ACTION_MS:
        for shape in SHAPES:
            fit = measure_sharing(
                link, dev["overhead_s"], dev["step_overhead_s"], Ms=MS, fwd_s=action / 1e3,
                bwd_s=action / 1e3, shape=shape, rounds=a.rounds,
            )  # fmt: skip
            per = ", ".join(f"{(m - s) * 1e3:.3f}" for _, m, s in fit.points)
            print(f"{action:g} | {shape[0] * shape[1] * 4 / 1024:g} | "
                  f"{fit.shared_message_s * 1e3:.3f} | {per}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
