"""Where to place the next max-batch trial, given what earlier trials found.

Two strategies share one state. ``model`` predicts the limit from the slope of the capped memory
that the largest fitting trials reported (their peak against the capacity they could use), and
falls back to geometric growth, galloping and bisection where the prediction says nothing new
or keeps missing. ``doubling``
is the textbook finder: double until the first OOM, then bisect. Both only ever propose
multiples of the granularity ``k``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Optional

MAX_PREDICTED_STEPS = 2
"""Predicted trials in a row inside a bracket before a bisection step guarantees progress."""

MAX_GROWTH = 4
"""A prediction may jump at most this factor past the largest fitting batch: a slope measured
on small batches is not trusted far beyond them."""


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
        """Bytes per sample between the two largest fitting batches (the part of the curve
        nearest the limit), or the hint while there is only one."""
        if len(self.usage) < 2:
            return self.slope_hint
        below, top = sorted(self.usage)[-2:]
        slope = (self.usage[top] - self.usage[below]) / (top - below)
        return slope if slope > 0 else None

    def predicted_limit(self) -> Optional[int]:
        """The largest batch the memory curve says fits, or None without a capacity or slope.

        With three fitting batches, a parabola through the three largest follows memory that
        grows faster than linearly (workspaces that scale with the batch); otherwise the slope
        extends the line from the largest fitting batch.
        """
        if self.capacity is None or self.lo not in self.usage:
            return None
        crossing = self._parabola_crossing() if len(self.usage) >= 3 else None
        if crossing is None:
            slope = self.slope()
            if slope is None:
                return None
            crossing = self.lo + (self.capacity - self.usage[self.lo]) / slope
        return self.floor(crossing)

    def _parabola_crossing(self) -> Optional[float]:
        (x0, x1, x2) = sorted(self.usage)[-3:]
        y0, y1, y2 = (self.usage[x] for x in (x0, x1, x2))
        d01, d12 = (y1 - y0) / (x1 - x0), (y2 - y1) / (x2 - x1)
        curvature = (d12 - d01) / (x2 - x0)
        if curvature <= 0:
            return None
        # y(x) = y2 + slope2 * (x - x2) + curvature * (x - x2) ** 2, slope2 the tangent at x2.
        slope2 = d12 + curvature * (x2 - x1)
        room = self.capacity - y2
        return x2 + (-slope2 + math.sqrt(slope2 ** 2 + 4 * curvature * room)) / (2 * curvature)

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
            return state.clamp(min(predicted, state.lo * MAX_GROWTH))
        return state.clamp(state.lo + state.k * 2 ** state.gallop)
    if predicted is not None and state.predicted_steps < MAX_PREDICTED_STEPS \
            and (predicted < state.hi or state.predicted_steps == 0):
        state.predicted_steps += 1
        return state.clamp(predicted)
    state.predicted_steps = 0
    return state.clamp(state.bisect())


STRATEGIES = {"model": propose_model, "doubling": propose_doubling}
