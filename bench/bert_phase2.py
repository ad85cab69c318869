"""Why NVIDIA's BERT-large phase-2 throughput is not an anchor of ``a100``: the simulator's own breakdown.

    python bench/bert_phase2.py [--profile a100]

NVIDIA's DeepLearningExamples BERT README gives, on one A100 80GB with AMP, 580 sequences/s of 128
tokens (phase 1) and 210 sequences/s of "512" (phase 2). This simulates both on the profile's
roofline, with attention as that code computes it (materialized: the L x L scores through memory)
and fused (``sim.attention``), splits the phase-2 step per pass and operator
(``sim.anchors.breakdown``) and prints tokens per second beside the published ones. Nothing here is
used by the simulator; it is the evidence behind the comment in ``conf/hardware/a100.yaml``.
"""

from __future__ import annotations

import argparse

from gpipe_repro.sim.anchors.breakdown import breakdown
from gpipe_repro.sim.hardware import load_profile
from gpipe_repro.sim.interface import Anchor

SOURCE = "https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/LanguageModeling/BERT/README.md"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--profile", default="a100")
    args = ap.parse_args()
    hw = load_profile(args.profile)
    for phase, batch, seq, published in (("1", 256, 128, 580.0), ("2", 32, 512, 210.0)):
        a = Anchor("bert_large", batch, seq, "half", 1, published, source=SOURCE)
        b = breakdown(hw, a)
        sim = batch / b.step_s
        print(
            f"phase {phase} ({batch} x {seq} tokens): published {published:.0f}/s = "
            f"{published * seq / 1e3:.1f}k tokens/s; simulated {sim:.1f}/s = {sim * seq / 1e3:.1f}k "
            f"tokens/s ({sim / published - 1:+.1%})"
        )
        assert b.fused_step_s is not None and b.attention_traffic_s is not None
        fused = batch / b.fused_step_s
        print(
            f"  attention's L x L scores in memory: {b.attention_traffic_s * 1e3:.1f} ms of "
            f"{b.step_s * 1e3:.1f} ms ({b.attention_traffic_s / b.step_s:.1%}); attention fused: "
            f"{fused:.1f}/s = {fused * seq / 1e3:.1f}k tokens/s ({fused / published - 1:+.1%})"
        )
        for name, op, s in b.parts[:6]:
            print(f"    {name:9s} {op:28s} {s * 1e3:8.1f} ms {s / b.step_s:6.1%}")


if __name__ == "__main__":
    main()
