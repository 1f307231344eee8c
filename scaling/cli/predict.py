"""``scaling predict``: what more devices would give, from a measured run and the scaling
model."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Dict, List, Optional

import click
from rich.table import Table

from scaling.cli.options import parse_device_list
from scaling.cli.output import console
from scaling.errors import ScalingError
from scaling.execute.store import ResultStore
from scaling.report.model import extrapolate
from scaling.report.tables import curve_label, series_key, with_scaling

PREDICTIONS_FILE = "predictions.csv"


def curve_inputs(rows: List[Dict], busbw_GBps: Optional[float]) -> Dict:
    """Series key -> the model's inputs for a curve: single step, batch, gradient bytes and the
    bus bandwidth (given, or measured at the curve's largest device count)."""
    curves: Dict = {}
    for row in rows:
        if row["status"] == "ok" and row.get("baseline_images_per_sec") and \
                row.get("gradient_bytes"):
            curves.setdefault(series_key(row), []).append(row)
    inputs = {}
    for key, group in curves.items():
        largest = max(row["total_devices"] for row in group)
        measured = [row["allreduce_busbw_GBps"] for row in group
                    if row["total_devices"] == largest and row.get("allreduce_busbw_GBps")]
        busbw = busbw_GBps or (statistics.median(measured) if measured else None)
        if busbw is None:
            continue
        first = group[0]
        inputs[key] = {"compute_s": first["batch_size"] / first["baseline_images_per_sec"],
                       "batch_size": first["batch_size"],
                       "gradient_bytes": first["gradient_bytes"], "busbw_GBps": busbw,
                       "measured": {row["total_devices"]: row["images_per_sec"]
                                    for row in group},
                       "busbw_source": "given" if busbw_GBps else f"measured at {largest}"}
    return inputs


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--devices", "device_list", default="8,16,64,256", show_default=True,
              help="Comma-separated device counts to predict.")
@click.option("--busbw-GBps", "busbw_GBps", type=float,
              help="Bus bandwidth of the allreduce within a node [default: each curve's "
                   "measured one, at its largest device count].")
@click.option("--devices-per-node", type=int,
              help="Devices per node: beyond it the ring crosses nodes.")
@click.option("--inter-node-busbw-GBps", "inter_node_busbw_GBps", type=float,
              help="Bus bandwidth across nodes (with --devices-per-node).")
def predict(run_dir, device_list, busbw_GBps, devices_per_node, inter_node_busbw_GBps):
    """Extrapolate each curve of RUN_DIR to device counts it never measured.

    The step at N devices is the single step plus the ring allreduce of the curve's gradient
    bytes, 2(N-1)/N x bytes / busbw, shown as a band between full overlap with the backward
    pass and none. "What would 8 GPUs over NVLink give, from my 2-GPU run" is
    `scaling predict RUN --devices 8 --busbw-GBps 150`. Writes RUN_DIR/predictions.csv.

    Exits 0, or 2 when no curve has what the model needs (an ok single baseline, gradient
    bytes, and a measured or given bus bandwidth)."""
    counts = parse_device_list(device_list)
    for name, value in (("--busbw-GBps", busbw_GBps),
                        ("--inter-node-busbw-GBps", inter_node_busbw_GBps)):
        if value is not None and value <= 0:
            raise ScalingError(f"{name} must be positive, got {value}")
    if (devices_per_node is None) != (inter_node_busbw_GBps is None):
        raise ScalingError("--devices-per-node and --inter-node-busbw-GBps go together")
    inputs = curve_inputs(with_scaling(ResultStore(run_dir).records()), busbw_GBps)
    if not inputs:
        raise ScalingError(f"no curve in {run_dir} has an ok single baseline, gradient bytes "
                           "and a bus bandwidth (measured over 2 or more devices, or "
                           "--busbw-GBps)")
    table = Table(title="Predicted images/sec: full overlap of the allreduce with the backward "
                        "pass to none")
    for header in ("curve", "devices", "busbw GB/s", "allreduce ms", "images/sec",
                   "efficiency", "measured"):
        table.add_column(header, justify="left" if header == "curve" else "right")
    lines = []
    for key, curve in sorted(inputs.items(), key=lambda item: str(item[0])):
        for line in extrapolate(curve["compute_s"], curve["batch_size"],
                                curve["gradient_bytes"], counts, curve["busbw_GBps"],
                                devices_per_node, inter_node_busbw_GBps):
            measured = curve["measured"].get(line["devices"])
            table.add_row(curve_label(key), str(line["devices"]), f"{line['busbw_GBps']:.3g}",
                          f"{line['allreduce_s'] * 1e3:,.1f}",
                          f"{line['images_per_sec_low']:,.1f}-{line['images_per_sec_high']:,.1f}",
                          f"{line['efficiency_low']:.0%}-{line['efficiency_high']:.0%}",
                          f"{measured:,.1f}" if measured else "-")
            lines.append({"curve": curve_label(key), **line,
                          "busbw_source": curve["busbw_source"]})
    console.print(table)
    path = Path(run_dir) / PREDICTIONS_FILE
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(lines[0]))
        writer.writeheader()
        writer.writerows(lines)
    console.print(f"wrote {path}")
