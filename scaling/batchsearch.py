"""Where to place the next max-batch trial, given what earlier trials found.

Two strategies share one state. ``model`` predicts the limit from the line through the capped
memory that fitting trials reported (their peak against the capacity they could use), and falls
back to geometric growth, galloping and bisection where the line says nothing new. ``doubling``
is the textbook finder: double until the first OOM, then bisect. Both only ever propose
multiples of the granularity ``k``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

MAX_PREDICTED_STEPS = 2
"""Predicted trials in a row inside a bracket before a bisection step guarantees progress."""


@dataclass
class Bracket:
    k: int
    start: int
    min_batch: int
    max_batch: Optional[int] = None
    lo: Optional[int] = None
    """The largest batch that fitted."""
    hi: Optional[int] = None
    """The smallest batch that ran out of memory."""
    usage: Dict[int, float] = field(default_factory=dict)
    """Batch -> capped memory peak of each fitting trial."""
    capacity: Optional[float] = None
    slope_hint: Optional[float] = None
    """Bytes per sample from another device count, used until this one has two points."""
    predicted_steps: int = 0
    gallop: int = 0
    trials: int = 0

    def fits(self, batch: int, usage: Optional[float], capacity: Optional[float]) -> None:
        if self.lo is not None and batch > self.lo and self.hi is None \
                and self.predicted_limit() is not None and batch > self.predicted_limit():
            self.gallop += 1
        self.trials += 1
        self.lo = batch if self.lo is None else max(self.lo, batch)
        if usage is not None:
            self.usage[batch] = usage
        if capacity is not None:
            self.capacity = capacity

    def out_of_memory(self, batch: int) -> None:
        self.trials += 1
        self.hi = batch if self.hi is None else min(self.hi, batch)

    def done(self) -> bool:
        if self.lo is None:
            return self.hi is not None and self.hi <= self.min_batch
        if self.hi is not None and self.lo + self.k >= self.hi:
            return True
        return self.max_batch is not None and self.lo >= self.max_batch

    def floor(self, batch: float) -> int:
        return max(self.k, int(batch // self.k) * self.k)

    def slope(self) -> Optional[float]:
        """Least-squares bytes per sample over the fitting trials, or the hint."""
        if len(self.usage) < 2:
            return self.slope_hint
        xs, ys = list(self.usage), list(self.usage.values())
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / var
        return slope if slope > 0 else None

    def predicted_limit(self) -> Optional[int]:
        """The largest batch the line says fits, or None without a capacity or slope."""
        slope = self.slope()
        if self.capacity is None or slope is None or self.lo not in self.usage:
            return None
        return self.floor(self.lo + (self.capacity - self.usage[self.lo]) / slope)

    def bisect(self) -> int:
        low = self.lo if self.lo is not None else self.min_batch - self.k
        return max(low + self.k, self.floor((low + self.hi) / 2))

    def clamp(self, batch: int) -> int:
        batch = max(batch, (self.lo or 0) + self.k)
        if self.hi is not None:
            batch = min(batch, self.hi - self.k)
        if self.max_batch is not None:
            batch = min(batch, self.max_batch)
        return batch


def propose_doubling(state: Bracket) -> Optional[int]:
    if state.done():
        return None
    if state.trials == 0:
        return state.start
    if state.hi is None:
        return state.clamp(state.lo * 2)
    return state.clamp(state.bisect())


def propose_model(state: Bracket) -> Optional[int]:
    if state.done():
        return None
    if state.trials == 0:
        return state.start
    if state.lo is None:
        return max(state.min_batch, state.floor(state.hi / 2))
    predicted = state.predicted_limit()
    if state.hi is None:
        if predicted is None:
            return state.clamp(state.lo * 2)
        if predicted > state.lo:
            return state.clamp(predicted)
        return state.clamp(state.lo + state.k * 2 ** state.gallop)
    if predicted is not None and state.predicted_steps < MAX_PREDICTED_STEPS:
        state.predicted_steps += 1
        return state.clamp(predicted)
    state.predicted_steps = 0
    return state.clamp(state.bisect())


STRATEGIES = {"model": propose_model, "doubling": propose_doubling}
