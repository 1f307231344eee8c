"""Turn the per-rank reports of one cell into its status and metrics."""

from __future__ import annotations

import statistics
from typing import Dict, List, Optional

STATUSES = ("ok", "oom", "timeout", "crashed", "error")


def _first_failure(reports: List[Dict]) -> Optional[Dict]:
    failed = [r for r in reports if r.get("status") != "ok"]
    return min(failed, key=lambda r: r.get("failed_at", float("inf"))) if failed else None


def summarize(
    reports: List[Dict], world_size: int, returncode: Optional[int], timed_out: bool,
    timeout_s: float,
) -> Dict:
    """Status, one-line error and metrics of a cell from its rank reports.

    ``images_per_sec`` is the global image count over the wall time from the earliest start to
    the latest end across ranks. A failing rank's own report wins over the timeout or a crash
    that it may have caused in the other ranks.
    """
    failure = _first_failure(reports)
    if failure is not None:
        return {"status": failure["status"], "error": f"rank {failure['rank']}: {failure['error']}"}
    reported = sorted(r["rank"] for r in reports)
    missing = sorted(set(range(world_size)) - set(reported))
    if timed_out:
        return {"status": "timeout",
                "error": f"no result within {timeout_s:g} s; ranks {missing} still running, "
                         "process group killed"}
    if missing:
        return {"status": "crashed",
                "error": f"ranks {missing} exited without a report "
                         f"(launcher exit code {returncode})"}
    start = min(r["start"] for r in reports)
    end = max(r["end"] for r in reports)
    images = sum(r["images"] for r in reports)
    peaks = [r["peak_memory_bytes"] for r in sorted(reports, key=lambda r: r["rank"])]
    return {
        "status": "ok",
        "error": None,
        "images_per_sec": images / (end - start),
        "timed_images": images,
        "timed_wall_s": end - start,
        "step_time_median_s": statistics.median(r["step_time_median_s"] for r in reports),
        "step_time_p95_s": max(r["step_time_p95_s"] for r in reports),
        "peak_memory_bytes": max(peaks),
        "peak_memory_bytes_per_rank": peaks,
    }
