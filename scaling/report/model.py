"""The scaling model beside every curve: what a step at N devices should take, and where the
rest of a measured step went.

A step at N devices is the sum of measured terms (``scaling.report.extrapolation`` does the
arithmetic, with each term's 95% interval):

- the compute: the ``single`` step, per-device batch / the baseline's images/sec;
- the launcher (``launcher_s``): the launcher's own cost at one device, its own 1-device step
  less the ``single`` step, both measured cells (from ``parallel_overhead``);
- the contention (``contention_s``): how much longer a forward and backward pass with nothing
  aggregated takes with all of the cell's devices busy than in the ``single`` cell alone
  (``local_step_s`` of each, timed in chunks after their windows); its sign is kept;
- communication beside the compute (``interference_s``): how much longer the same passes take
  in the same cell with an allreduce of the gradient bytes in flight beside each
  (``local_step_communicating_s``): the launcher's communication threads at work. It is
  charged in proportion to the communication that the launcher runs beside its compute
  (``beside_share``): from the profile, the collectives under compute of threads that never
  communicate over those plus the exposed ones (``communication_beside`` of the step
  breakdown). A launcher that runs its collectives after the backward pass, as tf.distribute
  and XLA on CPU do, pays for them as exposed communication, not twice; where the trace cannot
  see the collectives (DDP's and Horovod's threads on CPU) or the cell was not profiled, the
  share is 1;
- the exposed communication: the part of the allreduce, timed in the cell after its window
  (``allreduce_time_s``), that the launcher does not hide: the profile's communication share
  of the step where the cell has one, otherwise a band from full overlap of the backward pass
  (two thirds of the compute) to none.

Predicted images/sec is the global batch over the predicted step. ``prediction_ratio`` is
measured / predicted; ``loss_term`` names the largest part of the measured step beyond the
compute. The 1-device rows are the model's inputs, not predictions (``model_input``).
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional, Tuple

from scaling.launchers.single import BASELINE_LAUNCHER
from scaling.report.baseline import single_key
from scaling.report.curves import baseline_key
from scaling.report.extrapolation import (Term, compute_term, difference, leave_one_out,
                                          measured, rate, scaled, step_term, total)
from scaling.uncertainty import relative_half_width

TERMS = {"launcher_s": "the launcher", "contention_s": "contention",
         "interference_s": "communication beside compute"}
"""Each measured term of the step beyond the compute, and its name as a ``loss_term``."""

MODEL_FIELDS = ("model_input", "predicted_images_per_sec", "predicted_images_per_sec_low",
                "predicted_images_per_sec_high", "model_tells", "prediction_ratio", "loss_term",
                "loss_term_share", "beside_share",
                *(f"{name}{end}" for name in TERMS for end in ("", "_low", "_high")))


def launcher_term(row: Dict, compute_s: float) -> Optional[Term]:
    """The launcher's own 1-device step less the single step: compute x o / (1 - o) for a
    ``parallel_overhead`` o, its ends from o's (o itself where it has no interval); None where
    the curve has no single baseline."""
    overhead = row.get("parallel_overhead")
    if overhead is None or row.get("baseline_launcher") != BASELINE_LAUNCHER:
        return None
    ends = (row.get("parallel_overhead_low"), row.get("parallel_overhead_high"))
    if ends == (None, None):
        ends = (overhead, overhead)
    return Term(*(None if share is None or share >= 1 else compute_s * share / (1 - share)
                  for share in (overhead, *ends)))


def contention_term(row: Dict, alone_ci95: Optional[List[float]] = None) -> Optional[Term]:
    """The cell's local step less the single cell's (``alone_ci95``: the latter's interval),
    negative where the cell's was faster; None at one device and where either was not timed."""
    alone = row.get("baseline_local_step_s")
    if row["total_devices"] == 1 or not row.get("local_step_s") or not alone:
        return None
    return difference(measured(row["local_step_s"], row.get("local_step_s_ci95")),
                      measured(alone, alone_ci95))


def beside_share(row: Dict) -> float:
    """The share of the cell's communication that ran beside its compute: the profile's
    ``communication_beside`` over it plus the exposed ``communication``; 1 where the
    breakdown has no such share (collectives the trace cannot see, or no profile)."""
    breakdown = row.get("step_breakdown") or {}
    beside = breakdown.get("communication_beside")
    if beside is None or beside + breakdown["communication"] <= 0:
        return 1.0
    return beside / (beside + breakdown["communication"])


def interference_term(row: Dict, share: float) -> Optional[Term]:
    """The cell's local step with an allreduce in flight beside it less without, times
    ``share`` (:func:`beside_share`); None where not timed."""
    if not row.get("local_step_communicating_s") or not row.get("local_step_s"):
        return None
    return scaled(difference(measured(row["local_step_communicating_s"],
                                      row.get("local_step_communicating_s_ci95")),
                             measured(row["local_step_s"], row.get("local_step_s_ci95"))),
                  share)


def _fields(name: str, term: Optional[Term]) -> Dict:
    return dict(zip((name, f"{name}_low", f"{name}_high"), term or (None, None, None)))


def prediction(row: Dict, alone_ci95: Optional[List[float]] = None) -> Dict:
    """The model's fields for one sweep row (after ``with_scaling``). A 1-device row is an
    input (``model_input``: its compute, or the launcher's own cost) with no prediction; a
    row without a baseline, or whose allreduce was not measured, has none either. The
    prediction is the middle of the overlap band at the figures; its low and high ends take
    the ends of every term's interval (null at an open end)."""
    fields = dict.fromkeys(MODEL_FIELDS)
    if row["status"] != "ok" or not row.get("baseline_images_per_sec"):
        return fields
    compute, share = compute_term(row), beside_share(row)
    terms = {"launcher_s": launcher_term(row, compute.value),
             "contention_s": contention_term(row, alone_ci95),
             "interference_s": interference_term(row, share)}
    for name, term in terms.items():
        fields.update(_fields(name, term))
    if terms["interference_s"] is not None:
        fields["beside_share"] = share
    devices = row["total_devices"]
    if devices == 1:
        own = row["launcher"] == row.get("baseline_launcher")
        return {**fields, "model_input": "the compute" if own else "the launcher"}
    if row.get("mode") == "forward":
        allreduce = measured(0.0)
    elif row.get("allreduce_time_s") is not None:
        allreduce = measured(row["allreduce_time_s"], row.get("allreduce_time_s_ci95"))
    else:
        return fields
    found = {TERMS[name]: term for name, term in terms.items() if term is not None}
    busy = total([compute, *found.values()])
    step_s = row["batch_size"] * devices / row["images_per_sec"]
    breakdown = row.get("step_breakdown") or {}
    exposed = breakdown["communication"] * step_s if "communication" in breakdown else None
    step = step_term(busy, allreduce, exposed)
    images = row["batch_size"] * devices
    losses = {name: term.value for name, term in found.items()}
    losses["exposed communication"] = exposed if exposed is not None else step.value - busy.value
    losses["the rest"] = step_s - compute.value - sum(losses.values())
    low, high = rate(images, step.high), rate(images, step.low)
    return {**fields, "predicted_images_per_sec": images / step.value,
            "predicted_images_per_sec_low": low, "predicted_images_per_sec_high": high,
            "model_tells": tells(images / step.value, low, high),
            "prediction_ratio": row["images_per_sec"] * step.value / images,
            "loss_term": None if step_s <= compute.value else max(losses, key=losses.get),
            "loss_term_share": None if step_s <= compute.value
            else max(losses.values()) / step_s}


TELLING_BAND = 0.25
"""A prediction whose band reaches further than this fraction of it on either side cannot tell
a measurement that meets the model from one that misses it."""


def tells(predicted: float, low: Optional[float], high: Optional[float]) -> bool:
    """Whether the band from ``low`` to ``high`` (None: open) is within :data:`TELLING_BAND`
    of ``predicted`` on both sides."""
    return low is not None and high is not None and \
        max(predicted - low, high - predicted) <= TELLING_BAND * predicted


def alone_intervals(rows: List[Dict]) -> Dict[Tuple, List[float]]:
    """``single_key`` -> the interval of the single cells' ``local_step_s`` about their median:
    its own where one cell timed it; over several, the spread between them combined in
    quadrature with their own intervals' median width."""
    groups: Dict[Tuple, List[Dict]] = {}
    for row in rows:
        if row["launcher"] == BASELINE_LAUNCHER and row["total_devices"] == 1 and \
                row["status"] == "ok" and row.get("local_step_s"):
            groups.setdefault(single_key(row), []).append(row)
    found = {}
    for key, group in groups.items():
        own = [row["local_step_s_ci95"] for row in group if row.get("local_step_s_ci95")]
        if len(group) == 1:
            if own:
                found[key] = own[0]
            continue
        figures = [row["local_step_s"] for row in group]
        widths = [(high - low) / 2 / row["local_step_s"] for row, (low, high) in
                  zip(group, own)] if len(own) == len(group) else [0.0]
        relative = ((relative_half_width(figures) or 0.0) ** 2
                    + statistics.median(widths) ** 2) ** 0.5
        middle = statistics.median(figures)
        found[key] = [middle * (1 - relative), middle * (1 + relative)]
    return found


def with_predictions(rows: List[Dict]) -> List[Dict]:
    """``rows`` with :func:`prediction`'s fields added, and the leave-one-out check
    (``prediction_error``) on each curve with two or more multi-device points."""
    alone = alone_intervals(rows)
    for row in rows:
        # Only the contention of a multi-device row with both local steps reads the single
        # cells' interval.
        key = single_key(row) if row["status"] == "ok" and row["total_devices"] > 1 \
            and row.get("local_step_s") and row.get("baseline_local_step_s") else None
        row.update(prediction(row, alone.get(key)), **dict.fromkeys(ERROR_FIELDS))
    leave_one_out(rows, baseline_key)
    return rows


ERROR_FIELDS = ("prediction_error", "prediction_error_low", "prediction_error_high",
                "prediction_error_from")

MODEL_TITLE = ("The scaling model: measured against predicted images/sec (the single step, "
               "plus the launcher's own cost, contention, communication beside the compute and "
               "the allreduce the launcher does not hide); 1-device rows are its inputs")
MODEL_HEADERS = ("workload", "curve", "devices", "measured", "predicted (band)",
                 "measured / predicted", "launcher ms", "contention ms", "beside ms",
                 "largest loss", "leave-one-out error")


def _band(low: Optional[float], high: Optional[float]) -> str:
    """The band as the table prints it: nothing when narrower than 5%, "..." at an open end."""
    if low is not None and high is not None and high - low <= 0.05 * low:
        return ""
    return " ({}-{})".format(*("..." if end is None else f"{end:,.1f}" for end in (low, high)))


def milliseconds(row: Dict, name: str) -> str:
    """``+12.3 [+5.0, +19.6]`` ms for a term and its interval (none where it has none); ``-``
    where not measured."""
    if row.get(name) is None:
        return "-"
    ends = [row.get(f"{name}_low"), row.get(f"{name}_high")]
    spread = "" if ends[0] == ends[1] is not None else " [{}, {}]".format(
        *("..." if end is None else f"{end * 1e3:+,.1f}" for end in ends))
    return f"{row[name] * 1e3:+,.1f}{spread}"


def error_text(row: Dict) -> str:
    """``-4.2% [-9.0%, +0.6%] from 1, 2 devices``, or ``-``."""
    if row.get("prediction_error") is None:
        return "-"
    spread = "" if row.get("prediction_error_low") is None else \
        f" [{row['prediction_error_low']:+.1%}, {row['prediction_error_high']:+.1%}]"
    return f"{row['prediction_error']:+.1%}{spread} from {row['prediction_error_from']}"


def model_lines(rows: List[Dict], label) -> List[Tuple[str, ...]]:
    """One line per ok row that is an input of the model or has a prediction, in
    ``MODEL_HEADERS`` order; ``label`` names a row's curve."""
    lines = []
    for row in rows:
        predicted = row.get("predicted_images_per_sec")
        if predicted is None and not row.get("model_input"):
            continue
        if predicted is None:
            columns = (f"input: {row['model_input']}", "-")
        else:
            band = _band(row["predicted_images_per_sec_low"],
                         row["predicted_images_per_sec_high"])
            ratio = f"{row['prediction_ratio']:.2f}"
            columns = (f"{predicted:,.1f}{band}", ratio if row["model_tells"] else
                       f"{ratio}: cannot tell at this size (band over ±{TELLING_BAND:.0%})")
        lines.append((f"{row['workload']} at {row['image_size']}px on {row['device_type']}",
                      label(row), str(row["total_devices"]), f"{row['images_per_sec']:,.1f}",
                      *columns, *(milliseconds(row, name) for name in TERMS),
                      row.get("loss_term") or "-", error_text(row)))
    return sorted(lines, key=lambda line: (line[0], line[1], int(line[2])))
