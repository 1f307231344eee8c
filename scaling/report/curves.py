"""A curve's identity: what makes a curve (its fields, its baseline's key, its series key) and
how a curve and a family of curves are named. The row pipeline (``scaling.report.tables``) and
the scaling model (``scaling.report.model``) both build on it."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from scaling.report import json_text
from scaling.report.baseline import input_label


def reported_version(record: Dict) -> str:
    """The version of the record's framework, as its workers reported it ("" if none did)."""
    return str((record.get("versions") or {}).get(record["framework"], ""))


def explicit_threads(record: Dict) -> str:
    """``4 threads`` when a CPU cell's threads per device were given rather than the default
    (the cores over the largest device count), as on a threads axis; empty otherwise. Records
    from before ``threads_default`` took the cores split across their own devices as default."""
    threads = record.get("threads_per_device")
    if record["device_type"] != "cpu" or not threads:
        return ""
    cores = record.get("cpu_cores")
    if "threads_default" in record:
        default = record["threads_default"]
    else:
        default = not cores or threads == max(1, cores // record["devices"])
    return "" if default else f"{threads} thread" + ("s" if threads > 1 else "")


class Row(dict):
    """A sweep record with the report's columns (``scaling.report.tables.with_scaling``): a
    dict that also keeps its :func:`curve_fields`, worked out once when the row is made, so
    that every later pass of the report (the model, the summary, the terminal table, the HTML
    grids and figures) finds a row's curve without working it out again. The fields a curve is
    made of never change once the row is made; a copy (``{**row}``) is a plain dict again."""

    __slots__ = ("curve",)

    def __init__(self, record: Dict, curve: Optional[Tuple] = None, /, **fields):
        super().__init__(record, **fields)
        self.curve = _curve_fields(self) if curve is None else curve


def curve_fields(record: Dict) -> Tuple:
    """What a curve is made of, except the framework version: framework (or its variant, such
    as ``tensorflow@tf215``), launcher, workload, per-device batch, image size, device type,
    options (with threads per device where they are not the default, the real data with its
    loader workers, and the collectives' settings from the environment), mode and the device
    unit (a CPU device's threads, default or not), so that points of different units never
    join one curve nor pool as repeats. A :class:`Row`'s, as it keeps them."""
    if type(record) is Row:
        return record.curve
    return _curve_fields(record)


def _curve_fields(record: Dict) -> Tuple:
    options = record.get("options")
    options = json_text(options) if options else "{}"
    environment = record.get("collective_env")
    settings = " ".join(f"{name}={value}" for name, value in
                        sorted(environment.items())) if environment else ""
    extra = [text for text in (explicit_threads(record), input_label(record), settings) if text]
    if extra:
        options = " ".join(([options] if options != "{}" else []) + extra)
    unit = record.get("threads_per_device") if record["device_type"] == "cpu" else None
    return (record.get("variant") or record["framework"], record["launcher"],
            record["workload"], record["batch_size"], record["image_size"],
            record["device_type"], options, record.get("mode", "train"), unit)


def baseline_key(row: Dict) -> Tuple:
    """What a curve's baseline shares with it: everything but the device and node counts."""
    framework, *rest = curve_fields(row)
    return (framework, row["framework_version"], *rest)


def series_key(row: Dict) -> Tuple:
    """Rows that share this key form one scaling curve; the device count varies along it.
    Points on several nodes form their own curve."""
    return (*baseline_key(row), row.get("nodes", 1))


def curve_label(key: Tuple) -> str:
    """``torch 2.14.1 / torchrun, batch 16 {"xla": true}, 2 nodes`` for a series key."""
    return family_label(family_key(key), batch=key[4])


def family_key(key: Tuple) -> Tuple:
    """A series key without its per-device batch: the curves of one images/sec grid, whose
    rows are the batches and whose columns are the device counts."""
    return (*key[:4], *key[5:])


def family_label(family: Tuple, batch: Optional[int] = None) -> str:
    framework, version, launcher, _, _, _, options, mode, _, nodes = family
    label = f"{framework} {version}".strip() + f" / {launcher}"
    if batch is not None:
        label += f", batch {batch}"
    if options != "{}":
        label += f" {options}"
    if mode != "train":
        label += f", {mode}"
    return label + (f", {nodes} nodes" if nodes > 1 else "")
