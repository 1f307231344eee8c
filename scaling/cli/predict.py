"""``scaling predict``: what more devices would give, from a measured run and the scaling
model."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import List

import click
from rich.table import Table

from scaling.cli.options import parse_device_list
from scaling.cli.output import console
from scaling.errors import ScalingError
from scaling.execute.store import ResultStore
from scaling.report.extrapolation import predicted_curves
from scaling.report.model import with_predictions
from scaling.report.curves import curve_label, series_key
from scaling.report.tables import with_scaling

PREDICTIONS_FILE = "predictions.csv"


COLUMNS = ("curve", "devices", "busbw GB/s", "allreduce ms", "launcher ms", "contention ms",
           "beside ms", "images/sec", "efficiency", "measured", "measured / predicted")


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--devices", "device_list",
              help="Comma-separated device counts to predict beyond the measured ones "
                   "[default: 2, 4 and 8 times each curve's largest].")
@click.option("--busbw-GBps", "busbw_GBps", type=float,
              help="Bus bandwidth of the allreduce within a node [default: each curve's "
                   "measured one, at its largest device count].")
@click.option("--devices-per-node", type=int,
              help="Devices per node: beyond it the ring crosses nodes.")
@click.option("--inter-node-busbw-GBps", "inter_node_busbw_GBps", type=float,
              help="Bus bandwidth across nodes (with --devices-per-node).")
def predict(run_dir, device_list, busbw_GBps, devices_per_node, inter_node_busbw_GBps):
    """Extrapolate each curve of RUN_DIR to device counts it never measured, with the terms of
    the report's scaling model, and set the model beside every measured multi-device point.

    The step at N devices is the single step, plus the launcher's own cost at one device, plus
    the contention (fitted as k(N - 1) through the measured counts, time-sharing the cores
    beyond them on CPU), plus the communication beside the compute, plus the ring allreduce of
    the curve's gradient bytes, 2(N-1)/N x bytes / busbw, less what the profile shows hidden
    (a band between full overlap with the backward pass and none without a profile). "What
    would 8 GPUs over NVLink give, from my 2-GPU run" is
    `scaling predict RUN --devices 8 --busbw-GBps 150`. Writes RUN_DIR/predictions.csv, and
    redraws RUN_DIR/report.html, where there is one, with these predictions dashed.

    Exits 0, or 2 when no curve has what the model needs (an ok single baseline, gradient
    bytes, and a measured or given bus bandwidth)."""
    counts = parse_device_list(device_list) if device_list else None
    for name, value in (("--busbw-GBps", busbw_GBps),
                        ("--inter-node-busbw-GBps", inter_node_busbw_GBps)):
        if value is not None and value <= 0:
            raise ScalingError(f"{name} must be positive, got {value}")
    if (devices_per_node is None) != (inter_node_busbw_GBps is None):
        raise ScalingError("--devices-per-node and --inter-node-busbw-GBps go together")
    records = ResultStore(run_dir).records()
    rows = with_predictions(with_scaling(records))
    model = {"counts": counts, "busbw_GBps": busbw_GBps, "devices_per_node": devices_per_node,
             "inter_node_busbw_GBps": inter_node_busbw_GBps}
    curves = predicted_curves(rows, series_key, **model)
    if not curves:
        raise ScalingError(f"no curve in {run_dir} has an ok single baseline, gradient bytes "
                           "and a bus bandwidth (measured over 2 or more devices, or "
                           "--busbw-GBps)")
    table = Table(title="Predicted images/sec (band: the terms' intervals, and full overlap of "
                        "the allreduce with the backward pass to none where not profiled), "
                        "beside the measured points")
    for header in COLUMNS:
        table.add_column(header, justify="left" if header == "curve" else "right")
    lines = []
    for key, curve in sorted(curves.items(), key=lambda item: str(item[0])):
        for line in [*curve["checks"], *curve["lines"]]:
            table.add_row(curve_label(key), *cells(line))
            lines.append({"curve": curve_label(key), **line,
                          "busbw_source": curve["busbw_source"]})
    console.print(table)
    path = Path(run_dir) / PREDICTIONS_FILE
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(lines[0]))
        writer.writeheader()
        writer.writerows(lines)
    console.print(f"wrote {path}")
    if (Path(run_dir) / "report.html").exists():
        from scaling.report.html import write_html

        console.print(f"wrote {write_html(run_dir, rows, records, model)} (predicted curves "
                      "dashed)")


def _number(value, scale: float = 1.0, form: str = ",.1f") -> str:
    return "-" if value is None else format(value * scale, form)


def _range(low, middle, high, form: str) -> str:
    """``middle (low-high)``, ``...`` at an open end."""
    ends = "-".join("..." if end is None else format(end, form) for end in (low, high))
    return f"{format(middle, form)} ({ends})"


def cells(line) -> List[str]:
    """One line of the table after its curve: a prediction, and the measured figure where
    there is one."""
    return [str(line["devices"]), f"{line['busbw_GBps']:.3g}",
            _number(line["allreduce_s"], 1e3), _number(line["launcher_s"], 1e3, "+,.1f"),
            _number(line["contention_s"], 1e3, "+,.1f"),
            _number(line["interference_s"], 1e3, "+,.1f"),
            _range(line["images_per_sec_low"], line["images_per_sec"],
                   line["images_per_sec_high"], ",.1f"),
            _range(line["efficiency_low"], line["efficiency"], line["efficiency_high"], ".0%"),
            _number(line["measured"]), _number(line["measured_over_predicted"], 1, ".2f")]
