"""``python -m gpipe_repro.sim.anchors``: every published profile's anchors as a table, the curve's fit,
and this CPU's roofline against its measured costs (see the package's doc)."""

from __future__ import annotations

import argparse
import re
import statistics
from dataclasses import dataclass
from typing import Any

import torch

from ...models import MODELS
from ..count import LayerCount, count_layers
from ..hardware import PROFILES_DIR, load_config, load_profile
from ..measured import profile_layers
from ..measured.cpu import cpu_roofline
from ..roofline import HardwareProfile, RooflineCosts
from . import TOLERANCE, AnchorResult, check, fit


@dataclass(frozen=True)
class CpuRow:
    model: str
    micro_batch: int
    measured_s: float  # one micro-batch's forward + backward through every layer, as profiled
    roofline_s: float
    layer_median_error: float  # median over layers of |roofline / measured - 1|

    @property
    def error(self) -> float:
        return self.roofline_s / self.measured_s - 1.0


def check_cpu(
    hw: HardwareProfile, measured: dict[str, Any], counted: dict[str, list[LayerCount]]
) -> list[CpuRow]:
    """Per model and profiled micro-batch: the measured profile (``measured.LayerProfile``) against
    the roofline of ``hw`` on the model's counts."""
    rows = []
    for name, prof in measured.items():
        roof = RooflineCosts(hw, counted[name])
        for n in prof.sizes:
            meas = [c.forward_s + c.backward_s for c in prof.costs[n]]
            est = [c.forward_s + c.backward_s for c in roof.layer_costs(n)]
            per_layer = [abs(e / m - 1) for e, m in zip(est, meas) if m > 0]
            rows.append(CpuRow(name, n, sum(meas), sum(est), statistics.median(per_layer)))
    return rows


# the models the CPU check times here: AmoebaNet-shaped, Transformer-shaped, plain (small, real)
CPU_MODELS = ("tuplenet", "tokennet", "mlp")
CPU_SIZES = (2, 8, 32)


def _cpu_main() -> None:
    """The CPU check of the package doc, printed as a table (one intra-op thread, as the ranks)."""
    from ...data import DATASETS

    torch.set_num_threads(1)
    hw = cpu_roofline()
    measured, counted = {}, {}
    for name in CPU_MODELS:
        spec = MODELS[name]
        data = DATASETS["synthetic"].config()
        data.kind = spec.data_kind
        info = data.info()
        with torch.device("meta"):
            meta = spec.layers(info, spec.config())
        real = spec.layers(info, spec.config())

        def sample(n: int, info: Any = info) -> tuple[Any, torch.Tensor]:
            shape = info.shape if info.kind != "image" else ()
            return info.example(n, "cpu"), torch.zeros(n, *shape, dtype=torch.long)

        measured[name] = profile_layers(
            real, sample, list(CPU_SIZES), loss_fn=spec.loss_fn, repeats=5, use_cache=False
        )
        counted[name] = count_layers(meta, info.example(2, "meta"), spec.planning_loss)
    print(
        f"cpu roofline: peak {hw.peak_flops_fp32 / 1e9:.1f} GFLOP/s, copy "
        f"{hw.mem_bandwidth_Bps / 1e9:.1f} GB/s, one operator call {hw.op_min_s * 1e6:.1f} us\n"
    )
    print("| model | micro-batch | measured ms | roofline ms | error | median layer error |")
    print("|---|---|---|---|---|---|")
    for r in check_cpu(hw, measured, counted):
        print(
            f"| {r.model} | {r.micro_batch} | {r.measured_s * 1e3:.2f} | {r.roofline_s * 1e3:.2f} | "
            f"{r.error:+.0%} | {r.layer_median_error:.0%} |"
        )


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


def _table(results: list[AnchorResult]) -> str:
    rows = [
        "| profile | model | batch | seq | precision | use | published /s | simulated /s | error |"
    ]
    rows.append("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        a = r.anchor
        rows.append(
            f"| {r.profile} | {a.model} | {a.batch} | {a.seq or '-'} | {a.precision} | {a.use} | "
            f"{r.published:.1f} | {r.predicted:.1f} | {r.error:+.1%} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("profiles", nargs="*", help="profile names (default: every published one)")
    ap.add_argument("--fit", action="store_true", help="fit the curve's height on the fit anchors")
    ap.add_argument(
        "--write", action="store_true", help="with --fit: write the curve into its YAML"
    )
    ap.add_argument("--cpu", action="store_true", help="check this CPU's roofline instead")
    args = ap.parse_args(argv)
    if args.cpu:
        _cpu_main()
        return
    names = args.profiles or sorted(
        p.stem for p in PROFILES_DIR.glob("*.yaml") if load_config(p).name != "measured"
    )
    results: list[AnchorResult] = []
    for name in names:
        hw = load_profile(name)
        if args.fit:
            hw, factor = fit(hw)
            print(f"{name}: efficiency x {factor:.3f}, mem_efficiency {hw.mem_efficiency:.3f}")
            if args.write:
                _write_curve(name, hw)
        results += check(hw)
    print(_table(results))
    bad = [r for r in results if abs(r.error) > TOLERANCE]
    print(f"\n{len(results) - len(bad)} of {len(results)} anchors within {TOLERANCE:.0%}")


if __name__ == "__main__":
    main()
