"""Whether real input is the bound: each real-data cell against its two references.

A cell on real data (``data``) also measures, in the same processes after its window, the
input pipeline alone (``loader_images_per_sec``: same workers and shards, no model) and the
same steps on a synthetic batch (``synthetic_images_per_sec``). The input is the bound when the
cell runs below ``BOUND_SHARE`` of synthetic and the pipeline alone is not clearly faster
(``CLEARLY_FASTER``) than the cell: then the model waits for images. A cell below synthetic
whose pipeline alone is clearly faster loses to something else, such as decoding and training
competing for the same cores. With 0 workers the training process decodes between steps, so
the pipeline alone is always faster than the cell by the compute; within 1.5x, decoding takes
at least two thirds of the step.

Where the input is the bound, ``loader_workers_needed`` estimates the workers that would feed
the synthetic rate: synthetic images/sec over the pipeline's rate per worker (the training
process counts as one worker at 0). It assumes each added worker decodes as fast as the ones
measured, which stops holding once the workers and the model run out of cores.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

BOUND_SHARE = 0.95
CLEARLY_FASTER = 1.5

INPUT_TITLE = ("Real data: the cell against the same steps on a synthetic batch and against "
               "its input pipeline alone")
INPUT_HEADERS = ("workload", "curve", "devices", "real data", "synthetic", "pipeline alone",
                 "input-bound", "loader workers needed (estimate)")


def verdict(row: Dict) -> Dict[str, Optional[object]]:
    """``input_bound`` and ``loader_workers_needed`` for one row; None for each on synthetic
    data, for a cell that is not ok, or without both references."""
    real, synthetic = row.get("images_per_sec"), row.get("synthetic_images_per_sec")
    loader = row.get("loader_images_per_sec")
    if not row.get("data") or row["status"] != "ok" or not synthetic or not loader:
        return {"input_bound": None, "loader_workers_needed": None}
    bound = real < BOUND_SHARE * synthetic and not loader > CLEARLY_FASTER * real
    per_worker = loader / max(1, row.get("loader_workers", 0))
    return {"input_bound": bound,
            "loader_workers_needed": math.ceil(synthetic / per_worker) if bound else None}


def with_input_verdicts(rows: List[Dict]) -> List[Dict]:
    """``rows`` with :func:`verdict`'s fields added."""
    for row in rows:
        row.update(verdict(row))
    return rows


def input_lines(rows: List[Dict], label) -> List[Tuple[str, ...]]:
    """One line per ok real-data row with a verdict, in ``INPUT_HEADERS`` order; ``label``
    names a row's curve."""
    lines = []
    for row in rows:
        if row.get("input_bound") is None:
            continue
        needed = row["loader_workers_needed"]
        lines.append((f"{row['workload']} at {row['image_size']}px on {row['device_type']}",
                      label(row), str(row["total_devices"]), f"{row['images_per_sec']:,.1f}",
                      f"{row['synthetic_images_per_sec']:,.1f}",
                      f"{row['loader_images_per_sec']:,.1f}",
                      "yes" if row["input_bound"] else "no",
                      f"about {needed}" if needed is not None else "-"))
    return sorted(lines, key=lambda line: (line[0], line[1], int(line[2])))
