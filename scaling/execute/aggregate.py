"""Turn the per-rank reports of one cell into its status and metrics."""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional

from scaling.uncertainty import median_interval, relative_half_width, throughput_interval


def _earliest(reports: List[Dict], status: str) -> Optional[Dict]:
    matching = [r for r in reports if r.get("status") == status]
    return min(matching, key=lambda r: r["failed_at"]) if matching else None


def _failed(report: Dict) -> Dict:
    return {"status": report["status"], "error": f"rank {report['rank']}: {report['error']}",
            "oom_evidence": report.get("oom_evidence")}


def _mean_breakdown(reports: List[Dict]) -> Optional[Dict[str, float]]:
    """The ranks' step breakdowns, each share averaged over the ranks that have it; None when
    no rank profiled."""
    found = [r["step_breakdown"] for r in reports if r.get("step_breakdown")]
    if not found:
        return None
    shares = dict.fromkeys(share for breakdown in found for share in breakdown)
    return {share: statistics.fmean(b[share] for b in found if share in b) for share in shares}


def summarize(
    reports: List[Dict], world_size: int, returncode: Optional[int], timed_out: bool,
    timeout_s: float, first_rank: int = 0,
) -> Dict:
    """Status, one-line error and metrics of a cell from the reports of ranks ``first_rank``
    to ``first_rank + world_size - 1``.

    The root cause wins over its consequences: an OOM on any rank makes the cell ``oom`` even if
    its peers then failed in a collective; a rank killed by a signal, or one that died without a
    report, makes it ``crashed``; then the timeout; then the earliest reported error. Ranks
    stopped by the launcher or the harness report ``terminated``, which is no failure of their
    own.

    ``oom_evidence`` says why a cell is ``oom`` (the rank's own evidence); it is null otherwise.
    ``images_per_sec`` is the global image count over the longest rank window. Each rank times
    its window on its own clock between two barriers, so no two hosts' clocks are compared.
    Its 95% interval comes from the chunk times of the rank with that window.
    """
    outcome = _outcome(reports, world_size, returncode, timed_out, timeout_s, first_rank)
    outcome.setdefault("oom_evidence", None)
    return outcome


def _outcome(reports: List[Dict], world_size: int, returncode: Optional[int], timed_out: bool,
             timeout_s: float, first_rank: int) -> Dict:
    oom = _earliest(reports, "oom")
    if oom is not None:
        return _failed(oom)
    killed = _earliest(reports, "crashed")
    if killed is not None:
        return {"status": "crashed", "error": f"rank {killed['rank']} {killed['error']}"}
    missing = sorted(set(range(first_rank, first_rank + world_size)) - {r["rank"] for r in reports})
    if missing and not timed_out:
        return {"status": "crashed",
                "error": f"ranks {missing} died without a report "
                         f"(launcher exit code {returncode})"}
    if timed_out:
        running = missing + sorted(r["rank"] for r in reports if r["status"] == "terminated")
        return {"status": "timeout",
                "error": f"no result within {timeout_s:g} s (ranks {running} still running); "
                         "process tree killed"}
    error = _earliest(reports, "error")
    if error is not None:
        return _failed(error)
    if any(r["status"] != "ok" for r in reports):
        stopped = sorted(r["rank"] for r in reports if r["status"] != "ok")
        return {"status": "crashed",
                "error": f"ranks {stopped} were stopped (launcher exit code {returncode})"}
    return {"status": "ok", "error": None, **_metrics(reports)}


def _metrics(reports: List[Dict]) -> Dict:
    """What the ranks of a cell that ended ``ok`` measured, together."""
    if "allreduce" in reports[0]:
        return _allreduce_metrics(reports)
    slowest = max(reports, key=lambda r: r["window_s"])
    window = slowest["window_s"]
    images = sum(r["images"] for r in reports)
    peaks = [r["peak_memory_bytes"] for r in sorted(reports, key=lambda r: r["rank"])]
    return {
        "images_per_sec": images / window,
        "images_per_sec_ci95": throughput_interval(images / window, slowest["chunks"]),
        "timed_images": images,
        "timed_window_s": window,
        "steps_planned": max(r["steps_planned"] for r in reports),
        "steps_timed": slowest["steps_timed"],
        "step_breakdown": _mean_breakdown(reports),
        "step_time_median_s": statistics.median(r["step_time_median_s"] for r in reports),
        "step_time_p95_s": max(r["step_time_p95_s"] for r in reports),
        "peak_memory_bytes": max(peaks),
        "peak_memory_bytes_per_rank": peaks,
        "capped_memory_peak_bytes": max(r["capped_memory_peak_bytes"] for r in reports),
        "memory_capacity_bytes": min((r["memory_capacity_bytes"] for r in reports
                                      if r["memory_capacity_bytes"] is not None), default=None),
        **_gradient_allreduce(reports),
        **_local_steps(reports),
        **stragglers(reports),
        **{f"{name}_images_per_sec": _window_rate(reports, f"{name}_window")
           for name in ("loader", "synthetic")},
    }


def _window_rate(reports: List[Dict], window: str) -> Optional[float]:
    """All ranks' images over the longest of their ``window``s, or None where no rank had it
    (a cell on synthetic data has no loader or synthetic reference)."""
    if not all(r.get(window) for r in reports):
        return None
    return sum(r[window]["images"] for r in reports) / max(r[window]["window_s"]
                                                           for r in reports)


LOCAL_STEPS = (("local_step_s", "local_step_chunks"),
               ("local_step_communicating_s", "communicating_step_chunks"))
"""The record's figures of local steps (scaling.workers.loop.contended_compute), each with the
rank report's chunk means it comes from."""


def _local_steps(reports: List[Dict]) -> Dict:
    """Each of ``LOCAL_STEPS``: the median over ranks of their mean local step, and its 95%
    interval from the chunk means of every rank together; None where a rank did not time it."""
    found = {}
    for name, chunks in LOCAL_STEPS:
        timed = all(r.get(chunks) for r in reports)
        figure = statistics.median(statistics.fmean(r[chunks]) for r in reports) if timed \
            else None
        relative = relative_half_width([m for r in reports for m in r[chunks]]) if timed \
            else None
        found[name] = figure
        found[f"{name}_ci95"] = None if relative is None else [figure * (1 - relative),
                                                               figure * (1 + relative)]
    return found


STRAGGLER_SKEW = 1.2
"""A cell whose slowest rank took this many times the ranks' median is marked a straggler.
Over two ranks the median is their mean, so 1.2 there means one rank took 1.5x the other."""


def stragglers(reports: List[Dict]) -> Dict:
    """Each rank's median step time (``rank_step_s``) and mean local step
    (``rank_local_step_s``, where every rank timed one), by rank; the slowest rank, its node
    (``straggler_host``: the name its backend gave the rank's node, such as the Slurm node,
    else its host name; ``scaling.workers.common.node_name``), ``rank_skew`` (its figure over
    the ranks' median) and ``straggler``, the reason where the skew reaches
    ``STRAGGLER_SKEW``, naming the node and, where it differs, the host.

    The skew compares the local steps where they were timed: in the window every rank waits
    for the slowest at each allreduce, so their step times differ by little, while each rank's
    forward and backward passes with nothing aggregated take as long as its own device and
    node. With one rank there is no skew."""
    ranked = sorted(reports, key=lambda r: r["rank"])
    steps = [r["step_time_median_s"] for r in ranked]
    local = ([statistics.fmean(r["local_step_chunks"]) for r in ranked]
             if all(r.get("local_step_chunks") for r in ranked) else None)
    found = {"rank_step_s": steps, "rank_local_step_s": local, "straggler_rank": None,
             "straggler_host": None, "rank_skew": None, "straggler": None}
    if len(ranked) < 2:
        return found
    judged, what = (local, "local step") if local else (steps, "step time")
    slowest = max(range(len(ranked)), key=judged.__getitem__)
    skew = judged[slowest] / statistics.median(judged)
    rank, host = ranked[slowest]["rank"], ranked[slowest].get("host")
    node = ranked[slowest].get("node") or host
    found.update(straggler_rank=rank, straggler_host=node, rank_skew=skew)
    if skew >= STRAGGLER_SKEW:
        where = node if host in (None, node) else f"{node} (host {host})"
        found["straggler"] = (f"rank {rank} on {where} took {skew:.2f}x the ranks' median "
                              f"{what} ({judged[slowest]:.4g} s)")
    return found


def bus_factor(devices: int) -> float:
    """Bus bandwidth over algorithm bandwidth of a ring allreduce over ``devices``: 2(n-1)/n,
    the share of the data each device sends and receives (nccl-tests' convention)."""
    return 2 * (devices - 1) / devices


def size_figures(timed: List[Dict], devices: int) -> Dict:
    """One size's allreduce, from each rank's timing of it (``time_size``): the time of one
    call, each timed chunk's mean on its slowest rank, and the median over the chunks with its
    interval; the bandwidths in nccl-tests' convention."""
    first = timed[0]
    per_chunk = first["iterations_per_chunk"]
    chunk_times = [max(rank["chunk_seconds"][chunk] for rank in timed) / per_chunk
                   for chunk in range(len(first["chunk_seconds"]))]
    time_s = statistics.median(chunk_times)
    interval = median_interval(chunk_times)
    algbw = first["bytes"] / time_s / 1e9
    return {"bytes": first["bytes"], "time_s": time_s,
            "time_s_ci95": list(interval) if interval else None,
            "iterations": per_chunk * len(chunk_times),
            "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor(devices)}


def _allreduce_metrics(reports: List[Dict]) -> Dict:
    devices = reports[0]["allreduce_devices"]
    sizes = [size_figures([r["allreduce"][index] for r in reports], devices)
             for index in range(len(reports[0]["allreduce"]))]
    return {"allreduce_devices": devices, "allreduce": sizes,
            "timed_window_s": max(r["window_s"] for r in reports)}


def _gradient_allreduce(reports: List[Dict]) -> Dict:
    """The allreduce of the gradient bytes, timed after the window, where the ranks did."""
    timed = [r["gradient_allreduce"] for r in reports if r.get("gradient_allreduce")]
    if len(timed) < len(reports):
        return {}
    figures = size_figures(timed, timed[0]["devices"])
    return {"allreduce_time_s": figures["time_s"],
            "allreduce_time_s_ci95": figures["time_s_ci95"],
            "allreduce_busbw_GBps": figures["busbw_GBps"]}
