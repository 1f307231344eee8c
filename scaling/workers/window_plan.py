"""How many steps a window times, decided before it starts: the asked steps in chunks between
device synchronizations, more on real data than the loader workers hold ready, and under
``min_time_s`` enough to last that long at the warm-up's pace. Standard library only, as
``scaling.workers.loop`` that uses it."""

from __future__ import annotations

import math
from typing import Dict, Optional


def chunk_length(steps: int) -> int:
    """Steps between two device synchronizations: a tenth of the asked steps, at least one, so
    that a window has about ten chunks whose means give its step times and interval."""
    return max(1, steps // 10)


CALIBRATION_SKIP = 2
"""Warm-up steps left out of the calibration under ``min_time_s``: the first steps run slow
(allocation, tracing, autotuning, cold caches)."""

CALIBRATION_STEPS = 2
"""Warm-up steps, at least, timed after those for the calibration under ``min_time_s``: two,
so that their mean is of more than one step; :data:`CALIBRATION_SHARE`, not a count, decides
how many more short ones need. With three, a step that lasts a twentieth of ``min_time_s``
(0.3 s of a 6 s window) ran once more than the share asked, in every cell."""

CALIBRATION_SHARE = 0.1
"""The calibration's steps last at least this share of ``min_time_s``: the warm-up runs whole
steps more, as many as the ranks need at most, until they do. Tiny steps timed three at a time
misjudged the window's pace beyond :data:`PLAN_MARGIN` (29 of 146 cells of under 0.15 s a step,
2 of 16 up to 0.3 s, none of 64 of over 0.3 s, each timed over three steps), and each of those
timed a second window: a window's time more, where a tenth of it more calibrates."""

MIN_STEP_S = 1e-6
"""The shortest step a calibration believes: the steps it adds stay bounded."""

PLAN_MARGIN = 1.2
"""A window under ``min_time_s`` is planned to last this much longer: the warm-up's steps,
which still run a little slow (about 10% in tiny cells on a loaded 2-core machine), make the
planned count short."""

MAX_WINDOWS = 3
"""Windows timed at most under ``min_time_s``: one whose steps fell short of it on any rank is
timed again, planned on its own pace (tiny TensorFlow steps ran 40-60% faster in the window
than in the warm-up, and a machine whose load lifts runs the next window faster still)."""

READY_PER_WORKER = 2
"""Batches an input pipeline holds ready per loader worker: PyTorch's ``prefetch_factor``
(``scaling.workers.pytorch.input``), taken for TensorFlow's autotuned prefetch and Grain's
workers too (theirs was not measured)."""

READY_MULTIPLE = 10
"""A window on real data times at least this many times the batches its pipeline holds ready:
they fill while the warm-up runs slow, and a short window eats them faster than the loader
makes more (on an H100, 30 steps with 12 workers ran at 2,447 img/s, their last chunk seven
times the others, beside a loader alone at 2,074 img/s)."""


def warmup_steps(cell: Dict) -> int:
    """The warm-up's steps: the cell's ``warmup``, and under ``min_time_s`` at least
    :data:`CALIBRATION_STEPS` more than :data:`CALIBRATION_SKIP`, so that the window is planned
    on steps after the slow first ones."""
    if cell.get("min_time_s", 0.0) > 0:
        return max(cell["warmup"], CALIBRATION_SKIP + CALIBRATION_STEPS)
    return cell["warmup"]


def calibration_steps_more(cell: Dict, seconds: float, steps: int) -> int:
    """Steps to run after ``steps`` calibration steps that lasted ``seconds``, so that the
    calibration lasts :data:`CALIBRATION_SHARE` of the cell's ``min_time_s`` at their pace."""
    floor = CALIBRATION_SHARE * cell.get("min_time_s", 0.0)
    if seconds >= floor:
        return 0
    return math.ceil(floor / max(seconds / steps, MIN_STEP_S) - 1e-6) - steps


def ready_floor(cell: Dict) -> int:
    """The fewest steps a window on real data times: :data:`READY_MULTIPLE` x the batches its
    loader workers hold ready; 0 on synthetic data or without workers."""
    if not cell.get("data"):
        return 0
    return READY_MULTIPLE * READY_PER_WORKER * cell.get("loader_workers", 0)


def planned_steps(cell: Dict, step_s: Optional[float]) -> int:
    """The steps this rank would time: the asked steps; on real data, whole chunks more up to
    :func:`ready_floor`; and under ``min_time_s`` as many whole chunks more as the calibrated
    ``step_s`` says fill :data:`PLAN_MARGIN` x ``min_time_s``."""
    steps, min_time_s = cell["steps"], cell.get("min_time_s", 0.0)
    missing = ready_floor(cell) - steps
    if min_time_s and step_s:
        missing = max(missing, PLAN_MARGIN * min_time_s / step_s - steps)
    length = chunk_length(steps)
    return steps + length * max(0, math.ceil(missing / length))
