"""One reference pass per point: the repeats of a point that did not time the references
(``scaling.sweep.REFERENCES``) take them from the repeat that did.

The references (the local steps with and without an allreduce beside them, the gradients'
allreduce, and on real data the loader alone and the synthetic step) explain a point, not one
repeat of it: the same cell in the same process tree shape measures the same terms. So the
scaling model and the input verdict of every repeat read the same, once-timed figures, and
``references_from`` names the cell they came from.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Tuple

from scaling.cell import NOT_IDENTITY, Cell

REFERENCE_FIELDS = (
    "allreduce_time_s", "allreduce_time_s_ci95", "allreduce_busbw_GBps",
    "local_step_s", "local_step_s_ci95", "local_step_communicating_s",
    "local_step_communicating_s_ci95", "loader_images_per_sec", "synthetic_images_per_sec",
)
"""The record's fields that come from the references after the window."""

_POINT_FIELDS = tuple(spec.name for spec in dataclasses.fields(Cell)
                      if spec.name not in {"repeat", "references", *NOT_IDENTITY})


def point_key(record: Dict) -> Tuple:
    """What a point is: the cell's identity without its repeat, on the hosts it ran on."""
    return (*(json.dumps(record.get(name), sort_keys=True) for name in _POINT_FIELDS),
            tuple(record.get("hosts") or ()))


def timed_references(record: Dict) -> bool:
    return record.get("status") == "ok" and record.get("references", True) and \
        any(record.get(name) is not None for name in REFERENCE_FIELDS)


def with_shared_references(records: List[Dict]) -> List[Dict]:
    """``records`` with ``references_from`` on every one: its own cell where it timed the
    references, else the cell of its point's earliest repeat that did (whose reference fields
    it takes), or None where none did."""
    sources: Dict[Tuple, Dict] = {}
    for record in sorted(records, key=lambda r: r.get("repeat", 0)):
        if timed_references(record):
            sources.setdefault(point_key(record), record)
    for record in records:
        if timed_references(record) or record.get("references", True):
            record["references_from"] = record["cell"] if timed_references(record) else None
            continue
        source = sources.get(point_key(record))
        record["references_from"] = source["cell"] if source else None
        if source and record.get("status") == "ok":
            record.update({name: source.get(name) for name in REFERENCE_FIELDS})
    return records
