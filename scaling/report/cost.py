"""What a measurement costs, from prices the user gives; never guessed.

Prices are US dollars per hour: per device-hour under a device type (``cpu``, ``gpu``) or a
device name (``NVIDIA H100 80GB HBM3``), or per node-hour under ``instance`` (a whole machine,
as cloud instances are priced). They come from a sweep's ``prices:`` section, kept in
``OUT/sweep.yaml``, and from ``scaling report --price KEY=USD``, which wins. Without a price for
a cell, its cost columns stay empty.

- ``price_per_hour``: what the cell's devices (or nodes) cost per hour;
- ``cost_per_million_images`` = price per hour x 10^6 / (images/sec x 3600);
- ``time_to_million_images_s`` = 10^6 / images/sec;
- ``cost_relative`` and ``time_relative``: over those of the workload's reference cell, by
  default its fastest GPU cell (its fastest cell where no GPU ran).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import yaml

from scaling.report.provenance import SWEEP_FILE
from scaling.sweep import check_prices

MILLION = 1_000_000
COST_FIELDS = ("price_per_hour", "cost_per_million_images", "time_to_million_images_s",
               "cost_relative", "time_relative")

def sweep_prices(out_dir) -> Dict[str, float]:
    """The ``prices:`` of the sweep file kept in OUT, if any."""
    path = Path(out_dir) / SWEEP_FILE
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return check_prices(data.get("prices") or {}, str(path))

def price_per_hour(row: Dict, prices: Dict[str, float]) -> Optional[float]:
    if "instance" in prices:
        return prices["instance"] * row.get("nodes", 1)
    for key in (row.get("device_name"), row["device_type"]):
        if key in prices:
            return prices[key] * row["total_devices"]
    return None

def _reference(group: List[Dict]) -> Optional[Dict]:
    ok = [row for row in group if row["status"] == "ok"]
    gpus = [row for row in ok if row["device_type"] == "gpu"]
    return max(gpus or ok, key=lambda row: row["images_per_sec"], default=None)

def with_costs(rows: List[Dict], prices: Dict[str, float]) -> List[Dict]:
    """``rows`` with the cost columns (None where there is no price or no figure)."""
    groups: Dict[tuple, List[Dict]] = {}
    for row in rows:
        groups.setdefault((row["workload"], row["image_size"]), []).append(row)
    for group in groups.values():
        reference = _reference(group)
        for row in group:
            row.update(dict.fromkeys(COST_FIELDS))
            if row["status"] != "ok":
                continue
            row["time_to_million_images_s"] = MILLION / row["images_per_sec"]
            price = price_per_hour(row, prices)
            if price is not None:
                row["price_per_hour"] = price
                row["cost_per_million_images"] = price * MILLION / (row["images_per_sec"] * 3600)
            if reference is not None:
                row["time_relative"] = reference["images_per_sec"] / row["images_per_sec"]
                reference_price = price_per_hour(reference, prices)
                if price is not None and reference_price:
                    row["cost_relative"] = (row["cost_per_million_images"] /
                                            (reference_price * MILLION /
                                             (reference["images_per_sec"] * 3600)))
    return rows
