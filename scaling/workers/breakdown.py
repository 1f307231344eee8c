"""Where a step's time goes, from a profiler's Chrome trace (standard library only).

With ``profile`` on, every rank runs ``PROFILE_STEPS`` more steps under its framework's
profiler (torch.profiler, TensorFlow's profiler, MXNet's profiler) after its timed window (the
figure is never measured under the profiler) and writes ``cells/CELL/trace-rank{N}.json``. The
span of those steps splits into:

- ``compute``: time covered by compute work (GPU kernels on a GPU, operators on a CPU);
- ``communication``: time covered by collectives and transfers between devices (allreduce,
  broadcast: gloo, NCCL, kvstore, TensorFlow's collectives and sends) and not by compute, so
  communication that overlaps compute costs nothing here;
- ``idle``: the rest: host gaps, waiting, and on a GPU the device idle between kernels.

Apart from these three, ``communication_beside`` is the share of the span in which
communication ran while threads (on a GPU, streams) that never communicate computed: the
launcher's communication beside the compute, as DDP's and Horovod's threads or an NCCL stream
run it. A thread that both computes and communicates is one device's program: where one device
of a process waits in a collective while another computes, the devices wait for each other;
that is neither exposed nor beside. The scaling model charges the compute's slowing by
communication (``interference_s``) only in proportion to this share
(``scaling.report.model``).

Communication the trace cannot see (torch DDP's gloo allreduce on CPU runs in gloo's threads)
is timed by the worker and moved into ``communication`` (:func:`with_exposed_communication`);
such a breakdown has no ``communication_beside``.
"""

from __future__ import annotations

import json
import re
from typing import Dict, Iterable, List, Optional, Tuple

PROFILE_STEPS = 5
COMMUNICATION = re.compile(r"gloo|nccl|c10d::|all_?reduce|allgather|broadcast|kvstore|"
                           r"Copy[CG]PU2[CG]PU|collective|:_Send$|:_Recv$", re.IGNORECASE)
_NOT_WORK = {"user_annotation", "Trace", "python_function", "ac2g", "cuda_runtime",
             "cuda_driver", "gpu_user_annotation", "MXNET_C_API", "Device Storage"}
"""Trace categories that mark host API calls, annotations or memory, not work."""

Interval = Tuple[float, float]


def union(intervals: Iterable[Interval]) -> List[Interval]:
    merged: List[List[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def length(intervals: List[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def minus(intervals: List[Interval], cover: List[Interval]) -> List[Interval]:
    """The parts of merged ``intervals`` that merged ``cover`` does not cover."""
    left, index = [], 0
    for start, end in intervals:
        while index < len(cover) and cover[index][1] <= start:
            index += 1
        cursor, scan = start, index
        while scan < len(cover) and cover[scan][0] < end:
            if cover[scan][0] > cursor:
                left.append((cursor, cover[scan][0]))
            cursor = max(cursor, cover[scan][1])
            scan += 1
        if cursor < end:
            left.append((cursor, end))
    return left


def work_events(trace: Dict) -> List[Dict]:
    """Complete events (``ph: X``), with begin/end pairs (``B``/``E``, as MXNet writes them)
    joined into them, leaving out annotations, host API calls and memory."""
    events, open_events = [], {}
    for event in trace.get("traceEvents", []):
        if event.get("cat") in _NOT_WORK:
            continue
        phase = event.get("ph")
        if phase == "X" and isinstance(event.get("dur"), (int, float)):
            events.append(event)
        elif phase == "B":
            open_events.setdefault((event.get("pid"), event.get("tid")), []).append(event)
        elif phase == "E":
            stack = open_events.get((event.get("pid"), event.get("tid")))
            if stack:
                begin = stack.pop()
                events.append({**begin, "ph": "X", "dur": event["ts"] - begin["ts"]})
    return events


def step_breakdown(events: List[Dict], on_device: bool) -> Optional[Dict[str, float]]:
    """Fractions ``compute``, ``communication`` and ``idle`` of the span of ``events``.

    Communication is any event whose name says it is a collective; compute is every other
    event, or on a device its kernels only."""
    if not events:
        return None
    span = (min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events))
    total = span[1] - span[0]
    if total <= 0:
        return None
    communication, compute = [], []
    for event in events:
        interval = (event["ts"], event["ts"] + event["dur"])
        if COMMUNICATION.search(event["name"]):
            communication.append((interval, _thread(event)))
        elif not on_device or event.get("cat") == "kernel":
            compute.append((interval, _thread(event)))
    communicating = {thread for _, thread in communication}
    communication_union = union(interval for interval, _ in communication)
    compute_union = union(interval for interval, _ in compute)
    exposed = minus(communication_union, compute_union)
    unshared = minus(communication_union, union(
        interval for interval, thread in compute if thread not in communicating))
    shares = {"compute": length(compute_union) / total, "communication": length(exposed) / total}
    shares["idle"] = max(0.0, 1.0 - shares["compute"] - shares["communication"])
    beside = length(communication_union) - length(unshared)
    return {**shares, "communication_beside": beside / total}


def _thread(event: Dict) -> Tuple:
    return event.get("pid"), event.get("tid")


def breakdown_of_trace(path: str, on_device: bool) -> Optional[Dict]:
    with open(path) as trace:
        return step_breakdown(work_events(json.load(trace)), on_device)


def with_exposed_communication(shares: Dict[str, float], exposed: float) -> Dict[str, float]:
    """``shares`` with communication measured outside the trace (``exposed``, a share of the
    profiled steps): the wait for it shows in the trace as idle time or, inside the backward
    pass's operators, as compute, so it is taken from idle first, then from compute."""
    from_idle = min(shares["idle"], exposed)
    from_compute = min(shares["compute"], exposed - from_idle)
    return {"compute": shares["compute"] - from_compute,
            "communication": shares["communication"] + from_idle + from_compute,
            "idle": shares["idle"] - from_idle}
