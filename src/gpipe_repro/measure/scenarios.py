"""The planner's side of a scenario: its ranked list, the caps, the rules of thumb, all predicted.

The planner (``search.space``) sees a validation model as ``gpipe-plan`` sees a run's: per-layer
memory from the memory planner's meta measurements (``memory.stages.layer_activations``), costs
from this machine's measured profile and calibration (``sim.measured``), scored by the simulator
with the measured hardware's settings (``sim.measured.MeasuredDevice`` on this run's calibration); a
configuration that runs for real here has its messages cost its ranks what sharing this host's cores
costs them (``DeviceModel.ranks_link``), an emulated one does not (it stands for separate devices).
The search space, the exact peaks and the simulated step are ``gpipe-plan``'s own functions
(``search.subject``): the planner validated is the planner shipped. As ``gpipe-plan`` does, the
listed candidates are planned exactly and one over the cap is dropped. The list is every candidate of the measurable space (``top`` = all:
nothing pruned), restricted to K in the settings' Ks and one replica: K x replicas <= 2 runs for
real here, K = 4, 8 in emulation.

Caps (per model, from the planner's memory, so each model gets the same three regimes): ``naive``
= the K = 1, M = 1, remat-never peak (the whole mini-batch's activations on one device), ``least``
= the smallest cap under which the planner lists anything (``Predictor.least``: its fit test bounds
a cell's working set from above, so this can lie well above the smallest exact peak); loose = 1.05
naive, raised until everything is listed (``Predictor.everything``), mid and tight lie 50% and 15% of the way from ``least`` to ``naive`` (the
naive configuration no longer fits; at tight, mostly more stages, more micro-batches and remat).

Rules of thumb (``RULES``), each the pick with one choice made the usual way: equal layers
per stage, the partition balancing parameters, M = 4K, remat on every stage; where the pick's remat
no longer fits, remat always (what a user would try next); over the cap even so: it does not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import torch

from ..engine import balance_by_cost
from ..search.candidate import Candidate
from ..search.scan import search
from ..search.space import Space
from ..search.subject import Subject, exact_peaks, simulate_candidate, space_of
from ..sim.measured import DeviceModel, LayerProfile, MeasuredCosts, MeasuredDevice
from ..sim.measured.device import host_cores
from .configs import REAL_K
from .models import N, ValidationModel

__all__ = ["Planned", "Predictor", "CAP_POINTS", "RULES", "rule_configs"]

# The rules of thumb users apply today (GPipe §2.2 leaves the partition and M to the user).
RULES = {
    "equal_layers": "equal layers per stage",
    "params": "balance by parameters",
    "M=4K": "M = 4K",
    "remat_always": "remat always",
}

OPTIM = "rmsprop"  # the cells' optimiser
CAP_POINTS = {
    "loose": None,
    "mid": 0.5,
    "tight": 0.15,
}  # the way from least to naive (loose: 1.05 naive)


@dataclass(frozen=True)
class Planned:
    """A configuration with the planner's prediction (``Candidate`` + exact per-stage peaks)."""

    c: Candidate
    step_s: float
    stage_bytes: tuple[int, ...]

    @property
    def key(self) -> tuple[Any, ...]:
        c = self.c
        return (c.K, c.M, c.schedule, c.checkpoint, c.balance)


def _sample_fn(vm: ValidationModel) -> Callable[[int, str], Any]:
    def sample(n: int, device: str) -> Any:
        x = vm.sample(n)[0]
        return tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device)

    return sample


class Predictor:
    """One model's planner: search under a cap, exact peaks, any configuration simulated."""

    def __init__(
        self, vm: ValidationModel, profile: LayerProfile, dm: DeviceModel, Ks: list[int], max_m: int
    ) -> None:
        self.vm, self.dm, self.Ks, self.max_m = vm, dm, Ks, max_m
        self.layers = vm.meta_layers()
        self.subject = Subject(
            self.layers, _sample_fn(vm), vm.planning_loss, f"validate-plan|{vm.name}", OPTIM
        )
        self.hw = MeasuredDevice(calibration=dm)
        self.costs = MeasuredCosts(
            profile, dm.link, dm.overhead_s, step_overhead_s=dm.step_overhead_s
        )
        # a configuration that runs for real here (K x replicas <= REAL_K) has its ranks share this
        # host's cores: its messages cost them more (``DeviceModel.ranks_link``); an emulated one
        # stands for separate devices (``self.costs``: the idle link)
        self.shared = replace(self.costs, link=dm.ranks_link(host_cores()))
        self.params = [sum(p.numel() for p in la.parameters()) for la in self.layers]
        self._full = space_of(self.subject, 2**62, self.costs)  # for configurations off the list
        self._exact: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def _step(self, space: Space, c: Candidate) -> tuple[float, float]:
        real = c.K * c.replicas <= REAL_K
        r = simulate_candidate(self.hw, space, c, self.shared if real else None)
        return r.step_s, r.bubble_fraction

    def simulate(self, c: Candidate) -> tuple[float, float]:
        """The simulator on the measured costs, as the ``measured`` hardware runs it (``_step``)."""
        return self._step(self._full, c)

    def exact(self, c: Candidate) -> tuple[int, ...]:
        """The candidate's exact per-stage peaks, planned once (the caps' bisection asks again)."""
        key = (c.K, c.M, c.schedule, c.checkpoint, c.balance, c.micro_batch, c.replicas)
        if key not in self._exact:
            self._exact[key] = exact_peaks(self.subject, c)
        return self._exact[key]

    def planned(self, c: Candidate) -> Planned:
        return Planned(c, self.simulate(c)[0], self.exact(c))

    def ranked(self, cap: int) -> list[Planned]:
        """The planner's list under ``cap``: best predicted first, none over the cap."""
        space = space_of(self.subject, cap, self.costs)

        def simulate(c: Candidate) -> tuple[float, float]:
            return self._step(space, c)

        with torch.no_grad():
            cands, _ = search(space, max(self.Ks), N, self.max_m, 10**9, simulate)
        keep = [c for c in cands if c.K in self.Ks and c.replicas == 1]
        out = [
            p
            for p in (Planned(c, c.step_s, self.exact(c)) for c in keep)
            if max(p.stage_bytes) <= cap
        ]
        out.sort(key=lambda p: (p.step_s, max(p.stage_bytes)))  # ties: the least memory
        return out

    @cached_property
    def uncapped(self) -> list[Planned]:
        """The planner's list with no cap."""
        return self.ranked(2**62)

    def naive(self) -> int:
        """The K = 1, M = 1, remat-never peak: the whole mini-batch's activations on one device."""
        c = Candidate(1, 1, 1, "gpipe", ("never",), (len(self.layers),), N, N, 0.0)
        return max(self.exact(c))

    def least(self) -> int:
        """The smallest cap under which the planner lists a configuration. Its fit test bounds a
        cell's memory from above (``search.space``), so this lies at or above the smallest exact peak:
        a cap between them would leave the planner nothing to propose. Found by bisection on the
        cap in bytes (a larger cap never lists fewer configurations), below the uncapped list's
        largest exact peak: a listed candidate's threshold is
        the larger of its bound and its exact peak, and under a cap the partitions change, so the
        threshold need not be any uncapped candidate's exact peak."""
        lo, hi = 0, max(max(p.stage_bytes) for p in self.uncapped)
        while not self.ranked(hi):  # a bound can lie above every exact peak
            lo, hi = hi, 2 * hi
        while hi - lo > 1:  # ranked(lo) is empty, ranked(hi) is not
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.ranked(mid) else (mid, hi)
        return hi

    def everything(self, naive: int) -> int:
        """The loose cap: 1.05 naive, raised by quarters until the planner lists every configuration
        it lists uncapped (its fit test bounds memory from above, so 1.05 naive can leave some out)."""
        cap, n = int(1.05 * naive), len(self.uncapped)
        while len(self.ranked(cap)) < n:
            cap = int(1.25 * cap)
        return cap

    def caps(self) -> dict[str, int]:
        """The three caps in bytes (module doc)."""
        naive, least = self.naive(), self.least()
        out = {}
        for name, point in CAP_POINTS.items():
            out[name] = (
                self.everything(naive) if point is None else int(least + point * (naive - least))
            )
        return out


def _equal(L: int, K: int) -> tuple[int, ...]:
    return tuple(L // K + (1 if k < L % K else 0) for k in range(K))


def rule_configs(pred: Predictor, pick: Planned, cap: int) -> dict[str, Planned]:
    """Each rule of thumb applied to the pick (module doc): the configuration that fits, or the
    remat-always one over the cap (it does not fit)."""
    c, L = pick.c, len(pred.layers)
    cells = c.K * c.virtual_stages  # the partition's cells (v per stage: #39)
    always = ("always",) * c.K
    m4 = min(4 * c.K, N)
    variants = {
        "equal_layers": replace(c, balance=_equal(L, cells)),
        "params": replace(
            c, balance=tuple(balance_by_cost([float(p) for p in pred.params], cells))
        ),
        "M=4K": replace(c, M=m4, micro_batch=N // m4),
        "remat_always": replace(c, checkpoint=always),
    }
    out: dict[str, Planned] = {}
    for rule, v in variants.items():
        for modes in (v.checkpoint, always):
            out[rule] = pred.planned(replace(v, checkpoint=modes))
            if max(out[rule].stage_bytes) <= cap:
                break
    return out
