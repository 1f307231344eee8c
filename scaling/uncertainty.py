"""Intervals: of a cell's images/sec from its chunk times (95%), of a figure over repeats (the
standard error between them with the windows' own), and of speedup and efficiency, which divide
two figures."""

from __future__ import annotations

import math
import statistics
from typing import Dict, List, Optional, Tuple

from scipy.special import bdtr, ndtri, stdtrit

CONFIDENCE = 0.95
NORMAL_95 = float(ndtri((1 + CONFIDENCE) / 2))


def relative_half_width(samples: List[float]) -> Optional[float]:
    """Half the t interval of the mean of ``samples``, over the mean; None for fewer than two."""
    if len(samples) < 2:
        return None
    mean = statistics.fmean(samples)
    half = (float(stdtrit(len(samples) - 1, (1 + CONFIDENCE) / 2))
            * statistics.stdev(samples) / math.sqrt(len(samples)))
    return half / mean


def throughput_interval(images_per_sec: float, chunks: List[Dict]) -> Optional[List[float]]:
    """The interval of a cell's images/sec from the mean step times of its chunks (the steps
    between two device synchronizations): a step time t +- h is a throughput between
    images/(t + h) and images/(t - h)."""
    relative = relative_half_width([chunk["seconds"] / chunk["steps"] for chunk in chunks])
    if relative is None:
        return None
    high = images_per_sec / (1 - relative) if relative < 1 else math.inf
    return [images_per_sec / (1 + relative), high]


def repeats_interval(values: List[float]) -> Optional[List[float]]:
    """The t interval of the mean of repeated figures; None for fewer than two."""
    relative = relative_half_width(values)
    if relative is None:
        return None
    mean = statistics.fmean(values)
    return [mean * (1 - relative), mean * (1 + relative)]


def repeats_and_window_interval(values: List[float], windows: List[Optional[List[float]]]
                                ) -> Optional[List[float]]:
    """The interval of the median of ``values``, figures of repeats run in separate processes,
    each with its window's own interval (``windows``, from its chunk times, or None): the 95%
    normal half width of their mean, 1.96 standard errors (what changed between them), and the
    median of the windows' relative half widths (what changed inside them), added in
    quadrature, relative to the median. A standard error alone (half the range of two repeats)
    would be a 68% interval beside the windows' 95%; Student's quantile for two or three
    repeats (12.7, 4.3) would span most of the figure. A single figure keeps its window's
    interval. None where neither part exists."""
    median = statistics.median(values)
    own = [(window[1] - window[0]) / 2 / value for value, window in zip(values, windows)
           if window and window[1] < math.inf]
    if len(values) == 1:
        return list(windows[0]) if windows[0] else None
    between = NORMAL_95 * statistics.stdev(values) / math.sqrt(len(values)) / median
    within = statistics.median(own) if own else 0.0
    relative = math.hypot(between, within)
    return [median * (1 - relative), median * (1 + relative) if relative < 1 else math.inf]


def ratio_interval(ratio: float, numerator: Optional[List[float]], numerator_value: float,
                   denominator: Optional[List[float]], denominator_value: float
                   ) -> Optional[Tuple[float, float]]:
    """The interval of ``numerator / denominator`` from theirs, relative half widths added in
    quadrature; None when either has none."""
    if not numerator or not denominator:
        return None
    relative = math.hypot((numerator[1] - numerator[0]) / 2 / numerator_value,
                          (denominator[1] - denominator[0]) / 2 / denominator_value)
    return ratio * (1 - relative), ratio * (1 + relative)


def median_interval(samples: List[float]) -> Optional[Tuple[float, float]]:
    """A distribution-free interval of the median with at least 95% coverage: the order
    statistics ``k`` and ``n + 1 - k`` for the largest ``k`` with P(Binomial(n, 1/2) < k) at
    most 2.5%. None for fewer than 6 samples, which cannot give 95%."""
    ordered = sorted(samples)
    n = len(ordered)
    k = 0
    while bdtr(k, n, 0.5) <= (1 - CONFIDENCE) / 2:
        k += 1
    if k == 0:
        return None
    return ordered[k - 1], ordered[n - k]
