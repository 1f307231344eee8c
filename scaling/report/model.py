"""The scaling model beside every curve: what a step at N devices should take, and where the
rest of a measured step went.

A step at N devices is the ``single`` step (the compute: per-device batch / the baseline's
images/sec), plus the contention, plus the part of its gradients' allreduce that the launcher
does not hide under the backward pass:

- the contention is how much longer a forward and backward pass with nothing aggregated takes
  with all of the cell's devices busy at once than in the ``single`` cell alone
  (``local_step_s`` of each, timed after their windows): the host's cores, caches and memory
  bandwidth that CPU devices share, or the host side of GPU devices; 0 where not timed;

- the allreduce time is measured in the cell itself, after its window, at its own gradient
  bytes and device count, through the launcher's own collective (``allreduce_time_s``); for
  device counts never measured, the ring formula gives it from a bus bandwidth,
  2(n-1)/n x bytes / busbw;
- the overlap comes from the cell's ``--profile`` breakdown where it has one (the exposed
  communication is its communication share of the step); otherwise the prediction is a band
  between no overlap (compute + allreduce) and full overlap of the backward pass (compute +
  whatever of the allreduce outlasts the backward pass, two thirds of the compute).

Predicted images/sec is the global batch over the predicted step. ``prediction_ratio`` is
measured / predicted; ``loss_term`` names the largest part of the measured step beyond the
compute: contention, exposed communication, or the rest (the framework, the launcher).
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Dict, List, Optional, Tuple

BACKWARD_SHARE = 2 / 3
"""The backward pass's share of a forward-and-backward step (twice the forward's FLOPs)."""


def ring_allreduce_s(nbytes: float, devices: int, busbw_GBps: float) -> float:
    """A ring allreduce of ``nbytes`` over ``devices`` at bus bandwidth ``busbw_GBps``."""
    return 2 * (devices - 1) / devices * nbytes / (busbw_GBps * 1e9) if devices > 1 else 0.0


def step_band(compute_s: float, allreduce_s: float,
              exposed_s: Optional[float] = None) -> Tuple[float, float]:
    """(shortest, longest) predicted step: the exposed communication where it was measured,
    otherwise full overlap of the backward pass to no overlap."""
    if exposed_s is not None:
        return compute_s + exposed_s, compute_s + exposed_s
    hidden = compute_s + max(0.0, allreduce_s - BACKWARD_SHARE * compute_s)
    return hidden, compute_s + allreduce_s


def prediction(row: Dict) -> Dict:
    """The model's fields for one sweep row (after ``with_scaling``): null where the row lacks
    a baseline, or its allreduce was not measured at more than one device. The prediction is
    the middle of the overlap band at the measured figures; its low and high ends also take
    the ends of the 95% intervals of the single figure and of the allreduce time, and are null
    where the single figure's interval is open on that side (too few or too noisy chunks)."""
    empty = dict.fromkeys(("predicted_images_per_sec", "predicted_images_per_sec_low",
                           "predicted_images_per_sec_high", "prediction_ratio", "loss_term",
                           "contention_s"))
    baseline, devices = row.get("baseline_images_per_sec"), row["total_devices"]
    if row["status"] != "ok" or not baseline:
        return empty
    if row.get("mode") == "forward" or devices == 1:
        allreduce = (0.0, 0.0, 0.0)
    elif row.get("allreduce_time_s") is not None:
        allreduce = (row["allreduce_time_s"],
                     *(row.get("allreduce_time_s_ci95") or [row["allreduce_time_s"]] * 2))
    else:
        return empty
    low, high = row.get("baseline_ci95") or (baseline, baseline)
    compute = tuple(_seconds(row["batch_size"], figure) for figure in (baseline, high, low))
    contention_s = contention(row)
    step_s = row["batch_size"] * devices / row["images_per_sec"]
    breakdown = row.get("step_breakdown") or {}
    exposed = breakdown["communication"] * step_s if "communication" in breakdown else None
    busy_s = compute[0] + contention_s
    middle = sum(step_band(busy_s, allreduce[0], exposed)) / 2
    images = row["batch_size"] * devices
    shortest = None if compute[1] is None else \
        step_band(compute[1] + contention_s, allreduce[1], exposed)[0]
    longest = None if compute[2] is None else \
        step_band(compute[2] + contention_s, allreduce[2], exposed)[1]
    terms = {"contention": contention_s,
             "exposed communication": exposed if exposed is not None else middle - busy_s}
    terms["the rest"] = step_s - compute[0] - sum(terms.values())
    return {"predicted_images_per_sec": images / middle,
            "predicted_images_per_sec_low": None if longest is None else images / longest,
            "predicted_images_per_sec_high": None if shortest is None else images / shortest,
            "prediction_ratio": row["images_per_sec"] * middle / images,
            "contention_s": contention_s,
            "loss_term": None if step_s <= compute[0] else max(terms, key=terms.get)}


def _seconds(batch_size: int, images_per_sec: float) -> Optional[float]:
    """One step's seconds at ``images_per_sec``; None at an open end of an interval."""
    return batch_size / images_per_sec if 0 < images_per_sec < math.inf else None


def contention(row: Dict) -> float:
    """How much longer the cell's compute took with all of its devices busy than the single
    cell's alone; 0 at one device, and where either was not timed."""
    local, alone = row.get("local_step_s"), row.get("baseline_local_step_s")
    if row["total_devices"] == 1 or not local or not alone:
        return 0.0
    return max(0.0, local - alone)


def with_predictions(rows: List[Dict]) -> List[Dict]:
    """``rows`` with :func:`prediction`'s fields added."""
    for row in rows:
        row.update(prediction(row))
    return rows


def extrapolate(compute_s: float, batch_size: int, gradient_bytes: float,
                counts: List[int], busbw_GBps: float,
                devices_per_node: Optional[int] = None,
                inter_node_busbw_GBps: Optional[float] = None) -> List[Dict]:
    """Predicted images/sec (a band: full overlap of the backward pass to none) at each device
    count, from the ring formula; beyond ``devices_per_node`` the ring crosses nodes and runs
    at ``inter_node_busbw_GBps``."""
    lines = []
    for devices in counts:
        crosses = devices_per_node is not None and devices > devices_per_node
        busbw = inter_node_busbw_GBps if crosses and inter_node_busbw_GBps else busbw_GBps
        allreduce_s = ring_allreduce_s(gradient_bytes, devices, busbw)
        shortest, longest = step_band(compute_s, allreduce_s)
        images = batch_size * devices
        lines.append({"devices": devices, "busbw_GBps": busbw, "allreduce_s": allreduce_s,
                      "images_per_sec_low": images / longest,
                      "images_per_sec_high": images / shortest,
                      "efficiency_low": compute_s / longest,
                      "efficiency_high": compute_s / shortest})
    return lines


def curve_inputs(rows: List[Dict], key: Callable[[Dict], Tuple],
                 busbw_GBps: Optional[float] = None) -> Dict:
    """``key`` (a row's curve) -> the model's inputs for the curve: single step, batch,
    gradient bytes, the bus bandwidth (given, or measured at the curve's largest device count)
    and the measured images/sec per device count; curves without a baseline or a bandwidth
    are left out."""
    curves: Dict = {}
    for row in rows:
        if row["status"] == "ok" and row.get("baseline_images_per_sec") and \
                row.get("gradient_bytes"):
            curves.setdefault(key(row), []).append(row)
    inputs = {}
    for curve, group in curves.items():
        largest = max(row["total_devices"] for row in group)
        measured = [row["allreduce_busbw_GBps"] for row in group
                    if row["total_devices"] == largest and row.get("allreduce_busbw_GBps")]
        busbw = busbw_GBps or (statistics.median(measured) if measured else None)
        if busbw is None:
            continue
        first = group[0]
        by_devices: Dict[int, List[float]] = {}
        for row in group:
            by_devices.setdefault(row["total_devices"], []).append(row["images_per_sec"])
        inputs[curve] = {"compute_s": first["batch_size"] / first["baseline_images_per_sec"],
                         "batch_size": first["batch_size"],
                         "gradient_bytes": first["gradient_bytes"], "busbw_GBps": busbw,
                         "measured": {devices: statistics.median(figures)
                                      for devices, figures in sorted(by_devices.items())},
                         "busbw_source": "given" if busbw_GBps else f"measured at {largest}"}
    return inputs


def predicted_curves(rows: List[Dict], key: Callable[[Dict], Tuple],
                     counts: Optional[List[int]] = None, busbw_GBps: Optional[float] = None,
                     devices_per_node: Optional[int] = None,
                     inter_node_busbw_GBps: Optional[float] = None) -> Dict[Tuple, Dict]:
    """``key`` (a row's curve) -> its inputs with ``lines``, the extrapolation to ``counts``
    (by default 2, 4 and 8 times the curve's largest measured device count)."""
    curves = curve_inputs(rows, key, busbw_GBps)
    for curve in curves.values():
        largest = max(curve["measured"])
        curve["lines"] = extrapolate(
            curve["compute_s"], curve["batch_size"], curve["gradient_bytes"],
            counts or [largest * factor for factor in (2, 4, 8)], curve["busbw_GBps"],
            devices_per_node, inter_node_busbw_GBps)
    return curves


MODEL_TITLE = ("The scaling model: measured against predicted images/sec (the single step, "
               "plus contention, plus the allreduce the launcher does not hide)")
MODEL_HEADERS = ("workload", "curve", "devices", "measured", "predicted (band)",
                 "measured / predicted", "largest loss")


def _band(low: Optional[float], high: Optional[float]) -> str:
    """The band as the table prints it: nothing when narrower than 5%, "..." at an open end."""
    if low is not None and high is not None and high - low <= 0.05 * low:
        return ""
    return " ({}-{})".format(*("..." if end is None else f"{end:,.1f}" for end in (low, high)))


def model_lines(rows: List[Dict], label) -> List[Tuple[str, ...]]:
    """One line per ok row with a prediction, but the baselines themselves, in
    ``MODEL_HEADERS`` order; ``label`` names a row's curve."""
    lines = []
    for row in rows:
        baseline_itself = row["total_devices"] == 1 and row["launcher"] == row.get(
            "baseline_launcher")
        if row.get("predicted_images_per_sec") is None or baseline_itself:
            continue
        band = _band(row["predicted_images_per_sec_low"], row["predicted_images_per_sec_high"])
        lines.append((f"{row['workload']} at {row['image_size']}px on {row['device_type']}",
                      label(row), str(row["total_devices"]), f"{row['images_per_sec']:,.1f}",
                      f"{row['predicted_images_per_sec']:,.1f}{band}",
                      f"{row['prediction_ratio']:.2f}", row["loss_term"] or "-"))
    return sorted(lines, key=lambda line: (line[0], line[1], int(line[2])))
