"""What the search answers: a scored configuration (``Candidate``) and how the search went (``Stats``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Candidate", "Stats"]


@dataclass(frozen=True)
class Candidate:
    K: int
    replicas: int
    M: int
    schedule: str
    checkpoint: tuple[str, ...]  # per stage
    balance: tuple[int, ...]  # per model cell: K * virtual_stages of them
    micro_batch: int  # per replica, dataset units
    batch_size: int  # global
    bound_s: float  # the lower bound on the step time
    step_s: float = 0.0  # simulated
    bubble: float = 0.0
    stage_bytes: tuple[int, ...] = ()  # planned (bound, then exact for shown rows)
    virtual_stages: int = 1  # cells per stage (interleaved, zb-h1 over v chunks)

    @property
    def schedule_name(self) -> str:
        """The schedule as the planner's table names it: ``interleaved v=2``."""
        v = self.virtual_stages
        return self.schedule + (f" v={v}" if v > 1 else "")

    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.step_s if self.step_s else self.batch_size / self.bound_s

    @property
    def remat(self) -> str:
        modes = set(self.checkpoint)
        return self.checkpoint[0] if len(modes) == 1 else ",".join(m[0] for m in self.checkpoint)


@dataclass
class Stats:
    enumerated: int = 0  # candidates scored: by memory, then by bound or by the simulator
    over_cap: int = 0  # (K, R, M, schedule, remat) where no partition fits
    pruned: int = 0
    simulated: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.enumerated / self.seconds if self.seconds else 0.0
