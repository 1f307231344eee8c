"""The scaling model's arithmetic, and each curve carried to device counts it did not measure.

A step is a sum of terms in seconds, each a figure with the ends of its 95% interval
(:class:`Term`). A curve's model (:func:`curve_model`) takes its measured inputs: the compute
(the ``single`` step), the launcher's own cost at one device, the contention, the compute's
slowing with communication beside it, the bus bandwidth of its allreduce and the share of the
allreduce left exposed. At a device count N (:func:`line_at`):

- the allreduce is the ring's, 2(N-1)/N x gradient bytes / bus bandwidth, at the bandwidth
  measured at the curve's largest device count (or one given, and across nodes another);
- the contention grows with the devices that share a node: c(d) = k(d - 1), k fitted through
  the origin to the measured counts; where a CPU node's devices ask for more threads than it
  has cores, the compute and that contention time-share the cores (x d x threads / cores);
  a curve measured only at one device per node keeps the mean of what it measured;
- the communication beside the compute scales with the bytes each device moves in the ring,
  2(N-1)/N, from the largest measured count;
- the exposed communication is the measured share of the allreduce left exposed (from the
  profile), or, without one, the band from full overlap with the backward pass to none.

:func:`leave_one_out` checks the model on each curve with two or more multi-device points: the
largest is predicted from the others only, and ``prediction_error`` is measured / predicted - 1.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from scaling.uncertainty import ratio_interval

BACKWARD_SHARE = 2 / 3
"""The backward pass's share of a forward-and-backward step (twice the forward's FLOPs)."""


class Term(NamedTuple):
    """Seconds of one part of a step, and the ends of its 95% interval (None at an open end)."""
    value: float
    low: Optional[float]
    high: Optional[float]


def measured(value: float, interval: Optional[List[float]] = None) -> Term:
    """A measured figure with its interval; without one, the figure at both ends."""
    low, high = interval or (value, value)
    return Term(value, low, high)


def total(terms: List[Term]) -> Term:
    """The sum of ``terms``: their figures, their low ends and their high ends added."""
    lows, highs = [term.low for term in terms], [term.high for term in terms]
    return Term(sum(term.value for term in terms), None if None in lows else sum(lows),
                None if None in highs else sum(highs))


def difference(larger: Term, smaller: Term) -> Term:
    """``larger`` - ``smaller``, its ends from the opposite ends of the two intervals; the sign
    is kept."""
    return Term(larger.value - smaller.value,
                None if None in (larger.low, smaller.high) else larger.low - smaller.high,
                None if None in (larger.high, smaller.low) else larger.high - smaller.low)


def mean_term(terms: List[Term]) -> Term:
    """The mean of ``terms``: of their figures, of their low ends and of their high ends."""
    return Term(*(None if None in ends else statistics.fmean(ends) for ends in zip(*terms)))


def scaled(term: Term, factor: float) -> Term:
    return Term(*(None if end is None else end * factor for end in term))


def ring_allreduce_s(nbytes: float, devices: int, busbw_GBps: float) -> float:
    """A ring allreduce of ``nbytes`` over ``devices`` at bus bandwidth ``busbw_GBps``."""
    return ring_share(devices) * nbytes / (busbw_GBps * 1e9)


def ring_share(devices: int) -> float:
    """The share of the bytes each device sends in a ring allreduce, 2(n-1)/n."""
    return 2 * (devices - 1) / devices


def step_band(compute_s: float, allreduce_s: float,
              exposed_s: Optional[float] = None) -> Tuple[float, float]:
    """(shortest, longest) step: the exposed communication where it was measured, otherwise
    full overlap of the backward pass to no overlap."""
    if exposed_s is not None:
        return compute_s + exposed_s, compute_s + exposed_s
    hidden = compute_s + max(0.0, allreduce_s - BACKWARD_SHARE * compute_s)
    return hidden, compute_s + allreduce_s


def step_term(busy: Term, allreduce: Term, exposed_s: Optional[float]) -> Term:
    """The predicted step: the middle of the overlap band at the figures, from the shortest at
    the terms' low ends to the longest at their high ends."""
    middle = sum(step_band(busy.value, allreduce.value, exposed_s)) / 2
    shortest = None if None in (busy.low, allreduce.low) else \
        step_band(busy.low, allreduce.low, exposed_s)[0]
    longest = None if None in (busy.high, allreduce.high) else \
        step_band(busy.high, allreduce.high, exposed_s)[1]
    return Term(middle, shortest, longest)


def rate(images: float, seconds: Optional[float]) -> Optional[float]:
    """Images/sec of a step of ``seconds``; None at an open or empty end."""
    return images / seconds if seconds is not None and 0 < seconds < math.inf else None


def compute_term(row: Dict) -> Term:
    """The single step, per-device batch / the baseline's images/sec, with its interval."""
    batch, baseline = row["batch_size"], row["baseline_images_per_sec"]
    low, high = row.get("baseline_ci95") or (baseline, baseline)
    seconds = [None if not 0 < figure < math.inf else batch / figure for figure in (high, low)]
    return Term(batch / baseline, *seconds)


def row_term(row: Dict, name: str) -> Optional[Term]:
    """The row's ``name``, ``name_low`` and ``name_high`` as a term; None where not measured."""
    if row.get(name) is None:
        return None
    return Term(row[name], row.get(f"{name}_low"), row.get(f"{name}_high"))


def cpu_sharing(row: Dict, devices_per_node: int) -> Tuple[int, float]:
    """(devices that run at once, time-share factor) on a node of ``devices_per_node``: on CPU,
    as many devices as the cores have threads for, and the rest share them; on GPU, all."""
    cores, threads = row.get("cpu_cores"), row.get("threads_per_device")
    if row["device_type"] != "cpu" or not cores or not threads:
        return devices_per_node, 1.0
    return (min(devices_per_node, max(1, cores // threads)),
            max(1.0, devices_per_node * threads / cores))


def contention_fit(rows: List[Dict], compute_s: float) -> Optional[Tuple[str, Term]]:
    """("slope", k) of c(d) = k(d - 1) through the measured contentions (each taken back from
    its time-share first), or ("constant", mean) where every point had one device per node;
    None where none was timed."""
    points = []
    for row in rows:
        contention = row_term(row, "contention_s")
        if contention is not None and row["total_devices"] > 1:
            running, share = cpu_sharing(row, row["devices"])
            points.append((running - 1, Term(*(None if end is None else
                                               (end + compute_s) / share - compute_s
                                               for end in contention))))
    if not points:
        return None
    weights = sum(x * x for x, _ in points)
    if not weights:
        return "constant", mean_term([term for _, term in points])
    return "slope", Term(*(None if None in ends else
                           sum(x * y for (x, _), y in zip(points, ends)) / weights
                           for ends in zip(*(term for _, term in points))))


def curve_model(group: List[Dict], busbw_GBps: Optional[float] = None) -> Optional[Dict]:
    """The model's inputs from a curve's ok rows (after :func:`~scaling.report.model.prediction`
    set their terms): None without a baseline, gradient bytes, or a measured or given bus
    bandwidth."""
    group = [row for row in group if row["status"] == "ok" and
             row.get("baseline_images_per_sec") and row.get("gradient_bytes")]
    multi = [row for row in group if row["total_devices"] > 1]
    largest = max((row["total_devices"] for row in multi), default=None)
    at_largest = [row for row in multi if row["total_devices"] == largest]
    found = [row["allreduce_busbw_GBps"] for row in at_largest if row.get("allreduce_busbw_GBps")]
    busbw = busbw_GBps or (statistics.median(found) if found else None)
    if busbw is None:
        return None
    first, compute = group[0], compute_term(group[0])
    timed = [row for row in at_largest if row.get("allreduce_time_s_ci95")]
    spread = [statistics.median(row["allreduce_time_s_ci95"][end] / row["allreduce_time_s"]
                                for row in timed) if timed else 1.0 for end in (0, 1)]
    beside = [row_term(row, "interference_s") for row in at_largest]
    exposed = [row["step_breakdown"]["communication"] * row["batch_size"]
               * row["total_devices"] / row["images_per_sec"] / row["allreduce_time_s"]
               for row in multi if "communication" in (row.get("step_breakdown") or {})
               and row.get("allreduce_time_s")]
    by_devices: Dict[int, List[float]] = {}
    for row in group:
        by_devices.setdefault(row["total_devices"], []).append(row["images_per_sec"])
    return {"batch_size": first["batch_size"], "gradient_bytes": first["gradient_bytes"],
            "compute": compute, "launcher": row_term(first, "launcher_s"),
            "contention": contention_fit(group, compute.value),
            "beside": (largest, mean_term(beside)) if beside and None not in beside else None,
            "exposed_share": statistics.median(exposed) if exposed else None,
            "busbw_GBps": busbw, "allreduce_spread": spread, "host": first,
            "nodes": first.get("nodes", 1),
            "busbw_source": "given" if busbw_GBps else f"measured at {largest}",
            "measured": {devices: statistics.median(figures)
                         for devices, figures in sorted(by_devices.items())}}


def contention_at(model: Dict, devices_per_node: int) -> Optional[Term]:
    """The contention at ``devices_per_node`` busy devices on a node, from the curve's fit."""
    if model["contention"] is None:
        return None
    kind, fitted = model["contention"]
    running, share = cpu_sharing(model["host"], devices_per_node)
    compute = model["compute"].value
    return Term(*(None if end is None else
                  (compute + (end * (running - 1) if kind == "slope" else end)) * share
                  - compute for end in fitted))


def line_at(model: Dict, devices: int, devices_per_node: int, busbw_GBps: float) -> Dict:
    """The predicted step at ``devices`` (``devices_per_node`` on each node) and its terms."""
    allreduce_s = ring_allreduce_s(model["gradient_bytes"], devices, busbw_GBps)
    low, high = model["allreduce_spread"]
    allreduce = Term(allreduce_s, allreduce_s * low, allreduce_s * high)
    contention = contention_at(model, devices_per_node)
    beside = None
    if model["beside"] is not None:
        measured_at, term = model["beside"]
        beside = scaled(term, ring_share(devices) / ring_share(measured_at))
    terms = [term for term in (model["launcher"], contention, beside) if term is not None]
    exposed = None if model["exposed_share"] is None else model["exposed_share"] * allreduce_s
    step = step_term(total([model["compute"], *terms]), allreduce, exposed)
    images = model["batch_size"] * devices
    compute = model["compute"].value
    return {"devices": devices, "busbw_GBps": busbw_GBps, "allreduce_s": allreduce_s,
            "launcher_s": model["launcher"].value if model["launcher"] else None,
            "contention_s": contention.value if contention else None,
            "interference_s": beside.value if beside else None,
            "images_per_sec": images / step.value,
            "images_per_sec_low": rate(images, step.high),
            "images_per_sec_high": rate(images, step.low),
            "efficiency": compute / step.value,
            "efficiency_low": None if step.high is None else compute / step.high,
            "efficiency_high": None if not step.low or step.low <= 0 else compute / step.low}


def extrapolate(model: Dict, counts: List[int], devices_per_node: Optional[int] = None,
                inter_node_busbw_GBps: Optional[float] = None) -> List[Dict]:
    """:func:`line_at` each of ``counts`` on the curve's own node count, or, with
    ``devices_per_node``, on as many nodes as the count needs: beyond one node the ring runs
    at ``inter_node_busbw_GBps``. Each line carries the measured images/sec where there is one."""
    lines = []
    for devices in counts:
        per_node = max(1, devices // model["nodes"])
        busbw = model["busbw_GBps"]
        if devices_per_node is not None:
            per_node = min(devices, devices_per_node)
            if devices > devices_per_node and inter_node_busbw_GBps:
                busbw = inter_node_busbw_GBps
        line = line_at(model, devices, per_node, busbw)
        figure = model["measured"].get(devices)
        lines.append({**line, "measured": figure,
                      "measured_over_predicted": figure / line["images_per_sec"]
                      if figure else None})
    return lines


def predicted_curves(rows: List[Dict], key: Callable[[Dict], Tuple],
                     counts: Optional[List[int]] = None, busbw_GBps: Optional[float] = None,
                     devices_per_node: Optional[int] = None,
                     inter_node_busbw_GBps: Optional[float] = None) -> Dict[Tuple, Dict]:
    """``key`` (a row's curve) -> its model with ``checks``, the model at each measured
    multi-device count beside the measured figure, and ``lines``, at the ``counts`` beyond the
    largest measured one (by default 2, 4 and 8 times it)."""
    curves: Dict[Tuple, List[Dict]] = {}
    for row in rows:
        curves.setdefault(key(row), []).append(row)
    found = {}
    for curve, group in curves.items():
        model = curve_model(group, busbw_GBps)
        if model is None:
            continue
        largest = max(model["measured"])
        options = (devices_per_node, inter_node_busbw_GBps)
        model["checks"] = extrapolate(model, [count for count in model["measured"] if count > 1],
                                      *options)
        model["lines"] = extrapolate(model, sorted(
            count for count in counts or [largest * factor for factor in (2, 4, 8)]
            if count > largest), *options)
        found[curve] = model
    return found


def point(row: Dict) -> Tuple[int, int]:
    """A row's place on its curve: (devices in all, nodes)."""
    return row["total_devices"], row.get("nodes", 1)


def leave_one_out(rows: List[Dict], key: Callable[[Dict], Tuple]) -> None:
    """On each curve (rows that share ``key``, any node count) with two or more multi-device
    points: the largest point predicted from the others alone, as ``prediction_error`` =
    measured / predicted - 1 (with ``prediction_error_low`` and ``_high`` from the measured
    figure's interval and the prediction's band) and ``prediction_error_from``."""
    curves: Dict[Tuple, List[Dict]] = {}
    for row in rows:
        if row["status"] == "ok" and row.get("baseline_images_per_sec"):
            curves.setdefault(key(row), []).append(row)
    for group in curves.values():
        points = sorted({point(row) for row in group if row["total_devices"] > 1})
        if len(points) < 2:
            continue
        others = [row for row in group if point(row) != points[-1]]
        model = curve_model(others)
        if model is None:
            continue
        origin = ", ".join(f"{devices}" + (f" over {nodes} nodes" if nodes > 1 else "")
                           for devices, nodes in sorted({point(row) for row in others}))
        for row in group:
            if point(row) == points[-1]:
                row.update(prediction_error_fields(row, line_at(
                    model, row["total_devices"], row["devices"], model["busbw_GBps"])),
                    prediction_error_from=f"{origin} devices")


def prediction_error_fields(row: Dict, line: Dict) -> Dict:
    """``prediction_error`` and its interval for a measured row against a predicted line."""
    ratio = row["images_per_sec"] / line["images_per_sec"]
    band = [line["images_per_sec_low"], line["images_per_sec_high"]]
    bounds = ratio_interval(ratio, row.get("images_per_sec_ci95"), row["images_per_sec"],
                            band if None not in band else None, line["images_per_sec"])
    return {"prediction_error": ratio - 1,
            "prediction_error_low": bounds[0] - 1 if bounds else None,
            "prediction_error_high": bounds[1] - 1 if bounds else None}
