"""``scaling matmul`` (is the GPU worth it?) and ``scaling compare`` (did anything regress?)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from scaling import hardware
from scaling.cli.output import console, prepare_out_dir
from scaling.errors import ScalingError, positive_int
from scaling.execute.store import ResultStore
from scaling.report import many_records
from scaling.workers.matmul_worker import KERNELS


@click.command()
@click.option("--framework", "frameworks", default="torch", show_default=True,
              help=f"Comma-separated: {', '.join(KERNELS)}.")
@click.option("--sizes", help="Comma-separated matrix sides [default: the reference's 10, 50, "
                              "100, 200, ..., 1000, 2000, ..., 20000], capped by memory.")
@click.option("--device-type", "device_types",
              help="Comma-separated: cpu, gpu [default: cpu,gpu, or cpu without GPUs].")
@click.option("--dtype", type=click.Choice(["float32", "float64", "float16", "bfloat16"]),
              default="float32", show_default=True)
@click.option("--repeats", type=int, default=5, show_default=True,
              help="Timed products per size; the figure is their median.")
@click.option("--timeout", "timeout_s", type=float, default=1800, show_default=True,
              help="Seconds for all sizes of one framework and device.")
@click.option("--out", "out_dir", default="runs/matmul", show_default=True,
              type=click.Path(file_okay=False))
def matmul(frameworks, sizes, device_types, dtype, repeats, timeout_s, out_dir):
    """The matrix benchmark: an n x n random matrix times its transpose, then summed, on CPU
    and GPU. Start-up and allocation are not timed, the device is synchronized, each product is
    checked against the closed form of its sum, and a size's figure is the median of --repeats.
    Records go to OUT/results.jsonl (kind: matmul); OUT/matmul.csv and two plots (time against
    n, CPU/GPU ratio against n) follow, with the crossover n where the GPU starts to win.

    Exits 0 once every size has a status, 2 for bad input."""
    from scaling.execute import matmul as bench
    from scaling.report.figures import matmul_figures, save_png

    names = [name.strip() for name in frameworks.split(",") if name.strip()]
    for name in names:
        if name not in bench.FRAMEWORKS:
            raise ScalingError(f"unknown matmul framework {name!r}; valid: "
                               f"{', '.join(bench.FRAMEWORKS)}")
    has_gpu = hardware.gpu_count() > 0
    devices = [d.strip() for d in (device_types or ("cpu,gpu" if has_gpu else "cpu")).split(",")]
    for device in devices:
        if device not in ("cpu", "gpu"):
            raise ScalingError(f"unknown device type {device!r}; valid: cpu, gpu")
    if "gpu" in devices and not has_gpu:
        raise ScalingError("--device-type gpu: this machine has no GPU (nvidia-smi finds none)")
    positive_int("--repeats", repeats)
    if not has_gpu:
        console.print("no GPU on this machine: the matrix benchmark runs on the CPU only, with "
                      "no CPU/GPU ratio or crossover")
    prepare_out_dir(out_dir)

    def show(record):
        if "left_out" in record:
            console.print(f"{record['framework']} on {record['device_type']}: sizes "
                          f"{record['left_out']} left out (over half the free memory)")
        elif record["status"] == "ok":
            console.print(f"{record['framework']} {record['device_type']} n={record['n']}: "
                          f"{record['seconds']:.6f} s, {record['tflops']:.3f} TFLOP/s")
        else:
            console.print(f"{record['framework']} {record['device_type']} n={record['n']}: "
                          f"{record['status']}: {record['error']}")

    bench.run_matmul(out_dir, names, devices, bench.parse_sizes(sizes), dtype, repeats,
                     timeout_s, on_row=show)
    records = bench.matmul_records(ResultStore(out_dir).records())
    console.print(f"wrote {bench.write_matmul_csv(records, out_dir)}")
    for name, figure in matmul_figures(records):
        console.print(f"wrote {save_png(figure, Path(out_dir) / f'{name}.png')}")
    if has_gpu and "gpu" in devices and "cpu" in devices:
        for name in names:
            found = bench.crossover(records, name)
            console.print(f"{name}: the GPU is faster from n = {found} on" if found
                          else f"{name}: the GPU is not faster for good at any measured n")


VERDICT_STYLES = {"regression": "bold red", "improvement": "green", "within noise": "yellow"}


@click.command(name="compare")
@click.argument("base_dir", type=click.Path(file_okay=False, exists=True))
@click.argument("new_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--threshold", default="5%", show_default=True,
              help="Smallest change of images/sec that counts: a percentage (5%) or a "
                   "fraction (0.05).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False),
              help="Also write the comparison, one row per cell, to this CSV file.")
def compare_command(base_dir, new_dir, threshold, csv_path):
    """Compare the cells that BASE_DIR and NEW_DIR both measured: new images/sec against base,
    with intervals (the spread of repeats). A change beyond the threshold is a regression or
    an improvement unless the intervals overlap ("within noise"); a cell that was ok and now
    fails is a regression. The nodes' fingerprints are compared too ("fingerprints differ:
    FIELD, ...").

    Exit status: 1 when any cell regressed, 0 otherwise, 2 for bad input."""
    from scaling.report.compare import (VERDICTS, cell_label, compare, fingerprint_differences,
                                        parse_threshold, write_comparison_csv)

    fraction = parse_threshold(threshold)
    records = []
    with many_records():
        for out_dir in (base_dir, new_dir):
            found = ResultStore(out_dir).records()
            if not found:
                raise ScalingError(f"{out_dir} holds no results (no results.jsonl records)")
            records.append(found)
        comparison = compare(*records, fraction)
    table = Table(title=f"{new_dir} against {base_dir}: images/sec (threshold {fraction:.0%})")
    for header, justify in (("cell", "left"), ("base", "right"), ("new", "right"),
                            ("change", "right"), ("verdict", "left")):
        table.add_column(header, justify=justify)
    for row in comparison.rows:
        change = f"{row['change']:+.1%}" if row["change"] is not None else "-"
        style = VERDICT_STYLES.get(row["verdict"], "")
        table.add_row(cell_label(row), row["base"].text(), row["new"].text(), change,
                      f"[{style}]{row['verdict']}[/]" if style else row["verdict"])
    console.print(table)
    console.print(f"{len(comparison.rows)} cells compared: " + ", ".join(
        f"{comparison.count(name)} {name}" for name in VERDICTS) +
        f"; {comparison.only_base} only in base, {comparison.only_new} only in new",
        soft_wrap=True)
    differences = fingerprint_differences(base_dir, records[0], new_dir, records[1])
    if differences:
        console.print(f"fingerprints differ: {', '.join(differences)}", soft_wrap=True)
    if csv_path:
        console.print(f"wrote {write_comparison_csv(comparison, csv_path)}")
    sys.exit(1 if comparison.count("regression") else 0)
