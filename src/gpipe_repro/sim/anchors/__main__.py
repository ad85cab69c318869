"""``python -m gpipe_repro.sim.anchors [NAME...] [--fit [--write]] [--breakdown]``: a published profile's anchors.

Prints every anchor's error of each named profile (default: every published one); with ``--fit``
first fits the efficiency curve's height (and, with two or more fit anchors, the memory efficiency)
on its anchors marked ``fit`` (``fit``) and prints the factor; with ``--write`` writes the fitted curve
into ``conf/hardware/NAME.yaml``; with ``--breakdown`` splits each anchor's simulated step per pass and
operator and prints what attention's L x L memory traffic costs it (``breakdown``). The report of
every profile's anchors, per device, and of this CPU's roofline against its measured costs, is
``make validate-hw``.
"""

from __future__ import annotations

import argparse
import re

from ..hardware import PROFILES_DIR, load_profile, published_names
from ..interface import Anchor
from ..roofline import HardwareProfile
from . import check, fit


def _curve_yaml(hw: HardwareProfile) -> str:
    return "efficiency_curve:\n" + "".join(
        f"  - {{op_flops: {s:.4g}, efficiency: {e:.4f}}}\n" for s, e in hw.efficiency_curve
    )


def _write_curve(name: str, hw: HardwareProfile) -> None:
    """The fitted curve and memory efficiency into ``conf/hardware/NAME.yaml`` (in place)."""
    path = PROFILES_DIR / f"{name}.yaml"
    text = path.read_text()
    text = re.sub(r"^efficiency_curve:\n(?:  - .*\n)+", _curve_yaml(hw), text, count=1, flags=re.M)
    mem = f"mem_efficiency: {hw.mem_efficiency:.3f}"
    if re.search(r"^mem_efficiency: .*$", text, flags=re.M):
        text = re.sub(r"^mem_efficiency: .*$", mem, text, count=1, flags=re.M)
    else:
        text = re.sub(r"^(mem_bandwidth_Bps: .*)$", rf"\1\n{mem}", text, count=1, flags=re.M)
    path.write_text(text)


def _print_breakdown(hw: HardwareProfile, a: Anchor, top: int = 8) -> None:
    from .breakdown import breakdown

    b = breakdown(hw, a)
    print(
        f"    step {b.step_s * 1e3:.1f} ms: compute {b.compute_s * 1e3:.1f} ms, data-parallel "
        f"communication not hidden {b.comm_s * 1e3:.1f} ms"
    )
    for name, op, s in b.parts[:top]:
        print(f"    {name:9s} {op:32s} {s * 1e3:10.1f} ms {s / b.step_s:6.1%}")
    if b.attention_traffic_s is not None and b.fused_step_s is not None:
        print(
            f"    attention's L x L scores in memory: {b.attention_traffic_s * 1e3:.1f} ms "
            f"({b.attention_traffic_s / b.step_s:.1%} of the step; fused, the step would take "
            f"{b.fused_step_s * 1e3:.1f} ms)"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("profiles", nargs="*", help="profile names (default: every published one)")
    ap.add_argument("--fit", action="store_true", help="fit the curve's height on the fit anchors")
    ap.add_argument(
        "--write", action="store_true", help="with --fit: write the curve into its YAML"
    )
    ap.add_argument(
        "--breakdown", action="store_true", help="split each anchor's step per pass and operator"
    )
    args = ap.parse_args(argv)
    if args.write and not args.fit:
        ap.error("--write writes the fitted curve: it needs --fit")
    for name in args.profiles or published_names():
        hw = load_profile(name)
        if args.fit:
            hw, factor = fit(hw)
            print(f"{name}: efficiency x {factor:.3f}, mem_efficiency {hw.mem_efficiency:.3f}")
        else:
            print(f"{name}:")
        for r in check(hw):
            a = r.anchor
            print(f"  {a.use} {a.model} batch {a.batch} {a.precision}: {r.error:+.1%}")
            if args.breakdown:
                _print_breakdown(hw, a)
        if args.write:
            _write_curve(name, hw)


if __name__ == "__main__":
    main()
