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
from typing import Dict, List, Tuple

from scaling.cell import NOT_IDENTITY, Cell
from scaling.report import json_text

REFERENCE_FIELDS = (
    "allreduce_time_s", "allreduce_time_s_ci95", "allreduce_busbw_GBps",
    "local_step_s", "local_step_s_ci95", "local_step_communicating_s",
    "local_step_communicating_s_ci95", "loader_images_per_sec", "synthetic_images_per_sec",
)
"""The record's fields that come from the references after the window."""

_POINT_FIELDS = tuple(spec.name for spec in dataclasses.fields(Cell)
                      if spec.name not in {"repeat", "references", *NOT_IDENTITY})


def _exact(value):
    """``value`` as a key that two values share exactly where their JSON texts are the same
    (``1`` and ``1.0`` stay apart, as do ``True`` and ``1``): plain values as they are, tagged
    with their type, floats by their JSON text, lists and objects as JSON text."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return kind, value
    if kind is float:
        return kind, repr(value)
    if not value and (kind is dict or kind is list):
        return kind, None
    return json_text(value)


_TEXT_PLACES: Dict[Tuple, Tuple[int, ...]] = {}
"""By the types of a record's identity fields: where its values other than texts, integers,
booleans and None are (floats, lists, objects), which :func:`_exact` turns into keys."""
_AS_THEY_ARE = (str, int, bool, type(None))


def point_key(record: Dict) -> Tuple:
    """What a point is: the cell's identity without its repeat, on the hosts it ran on. Two
    records share it where each field has the same JSON text (the fields with their types,
    the floats, lists and objects by :func:`_exact`)."""
    values = list(map(record.get, _POINT_FIELDS))
    types = tuple(map(type, values))
    places = _TEXT_PLACES.get(types)
    if places is None:
        places = _TEXT_PLACES[types] = tuple(
            index for index, kind in enumerate(types) if kind not in _AS_THEY_ARE)
    for index in places:
        values[index] = _exact(values[index])
    return tuple(values), types, tuple(record.get("hosts") or ())


def timed_references(record: Dict) -> bool:
    return record.get("status") == "ok" and record.get("references", True) and \
        any(record.get(name) is not None for name in REFERENCE_FIELDS)


def with_shared_references(records: List[Dict]) -> List[Dict]:
    """``records`` with ``references_from`` on every one: its own cell where it timed the
    references, else the cell of its point's earliest repeat that did (whose reference fields
    it takes), or None where none did."""
    timed = {id(record): timed_references(record) for record in records}
    sources: Dict[Tuple, Dict] = {}
    for record in sorted(records, key=lambda r: r.get("repeat", 0)):
        if timed[id(record)]:
            sources.setdefault(point_key(record), record)
    for record in records:
        if timed[id(record)] or record.get("references", True):
            record["references_from"] = record["cell"] if timed[id(record)] else None
            continue
        source = sources.get(point_key(record))
        record["references_from"] = source["cell"] if source else None
        if source and record.get("status") == "ok":
            record.update({name: source.get(name) for name in REFERENCE_FIELDS})
    return records
