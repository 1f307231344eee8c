"""``scaling preflight``: is this node (this fleet) healthy enough to trust its numbers?"""

from __future__ import annotations

import shutil
from pathlib import Path

import click
from rich.table import Table

from scaling import hardware
from scaling.cell import DEVICE_TYPES, resolve_device_type
from scaling.backends import backend_option, open_backend
from scaling.cli.options import pop_scheduler_flags, scheduler_options
from scaling.cli.output import console, prepare_out_dir
from scaling.errors import EXIT_FAILED
from scaling.execute import preflight as check
from scaling.execute.store import ResultStore
from scaling.report.html import write_html
from scaling.report.tables import report


def print_verdict(verdict) -> None:
    table = Table(title=f"Preflight: each node alone, against {verdict['against']} "
                        f"(flagged: more than {verdict['threshold_pct']:g}% below)")
    table.add_column("node")
    for name in check.FIGURES:
        table.add_column(name, justify="right")
    table.add_column("verdict")
    for node in verdict["nodes"]:
        cells = []
        for name in check.FIGURES:
            measured = node["figures"].get(name)
            text = f"{measured['value']:.4g}" if measured else "-"
            cells.append(f"[red]{text} ![/red]" if name in node["flags"] else text)
        table.add_row(node["host"], *cells, "; ".join(node["flags"].values()) or "good")
    console.print(table)
    for node in verdict["nodes"]:
        for name, error in node["errors"].items():
            console.print(f"{node['host']}: no {name}: {error}")
    if verdict["flagged"]:
        console.print(f"flagged: {verdict['exclude']} (--exclude {verdict['exclude']})")
    console.print(f"good nodes: --nodelist {verdict['nodelist'] or '(none)'}")


def node_shape(device_type: str, devices, threads, cores) -> tuple:
    """Devices and threads per device of a node's check: every GPU, or 2 CPU workers, by
    default, and the cores shared among them."""
    devices = devices or (hardware.gpu_count() if device_type == "gpu" else 2)
    return devices, threads or max(1, (cores or hardware.cpu_cores()) // devices)


def preflight_first(spec, out_dir, backend) -> None:
    """A sweep's ``--preflight``: the nodes it may use checked at the sweep's largest device
    count per node (every GPU, or 2 CPU workers, for ``devices: all``), the verdict printed and
    kept in the sweep's folder, and the flagged nodes kept out of its cells
    (:meth:`~scaling.backends.base.Backend.preflight_sweep`). Exits 1 when fewer good nodes are
    left than the sweep's cells need."""
    [device_type] = spec.device_types()[:1]
    devices, threads = node_shape(
        device_type, max(spec.devices) if isinstance(spec.devices, list) else None, None,
        backend.cores(spec.slurm))
    check_spec = {"device_type": device_type, "devices": devices, "threads": threads,
                  "repeats": check.REPEATS, "threshold": 10.0, "baseline": None}
    verdict = backend.preflight_sweep(spec, out_dir, check_spec)
    if verdict is None:
        return
    if not verdict:
        raise click.exceptions.Exit(EXIT_FAILED)
    print_verdict(verdict)
    needed = max(spec.nodes) if isinstance(spec.nodes, list) else spec.nodes
    if len(verdict["good"]) < needed:
        console.print(f"{len(verdict['good'])} good node(s), and the sweep needs {needed}")
        raise click.exceptions.Exit(EXIT_FAILED)


def check_threshold(ctx, param, value: float) -> float:
    if not 0 < value < 100:
        raise click.BadParameter(f"must be a percentage between 0 and 100, got {value:g}")
    return value


@click.command()
@click.option("--device-type", type=click.Choice(DEVICE_TYPES), default="auto",
              show_default=True, help="auto: GPUs if there are any, else CPU workers.")
@click.option("--devices", type=click.IntRange(min=1),
              help="Devices of the node [default: its GPUs, or 2 CPU workers].")
@click.option("--threads-per-device", type=click.IntRange(min=1),
              help="CPU threads per worker [default: cores // devices, at least 1].")
@click.option("--nodes", type=click.IntRange(min=1),
              help="Nodes to check, in one allocation with --backend slurm [default: 1, or "
                   "those of --nodelist].")
@click.option("--nodelist", help="With --backend slurm: the nodes to check, in Slurm's form "
                                 "(n[1-4]).")
@click.option("--repeats", type=click.IntRange(min=1), default=check.REPEATS,
              show_default=True, help="Repeats of the matmul and the triad per device.")
@click.option("--threshold", type=float, default=10, show_default=True,
              callback=check_threshold,
              help="Flag a figure more than this percentage below its reference.")
@click.option("--baseline", type=click.Path(dir_okay=False),
              help="Judge against this saved preflight (--save-baseline) instead of the "
                   "fleet's median.")
@click.option("--save-baseline", type=click.Path(dir_okay=False),
              help="Also write this preflight to FILE, for later --baseline runs.")
@click.option("--out", "out_dir", default="runs/preflight", show_default=True,
              type=click.Path(file_okay=False))
@backend_option
@scheduler_options
@click.pass_context
def preflight(ctx, device_type, devices, threads_per_device, nodes, nodelist, repeats,
              threshold, baseline, save_baseline, out_dir, backend, wait, **slurm):
    """Measure each node alone, then flag the nodes that fall behind.

    Per node, device by device: the matmul ceiling and the memory bandwidth (a STREAM triad),
    each the median of --repeats; a short single cell of a small workload; and the allreduce
    bus bandwidth across the node's devices. A node's figure is its weakest device's. Each
    figure is compared with the fleet's median, or with --baseline's figure for the same host,
    and a figure more than --threshold percent below it flags the node.

    With --backend slurm, one job holds the nodes (--nodes or --nodelist): each node measures
    itself at once, then every pair of nodes (up to 8; beyond, each with the next in a ring)
    times an allreduce between them, and a node's pair_busbw_GBps is the median over its pairs.
    --wait blocks until the job ends and then prints the verdict.

    Writes OUT/preflight.json and the report's preflight section (OUT/report.html), prints a
    table per node and the good nodes as a --nodelist string.

    Exits 0 when no node is flagged, 1 when one is (or the job gave no verdict), 2 for bad
    input.
    """
    runner = open_backend(backend, pop_scheduler_flags(slurm))
    if baseline:
        check.read_baseline(baseline)
    device_type = resolve_device_type(device_type)
    devices, threads = node_shape(device_type, devices, threads_per_device, runner.cores())
    prepare_out_dir(out_dir)
    spec = {"device_type": device_type, "devices": devices, "threads": threads,
            "repeats": repeats, "threshold": threshold,
            "baseline": str(Path(baseline).resolve()) if baseline else None}
    verdict = runner.preflight(spec, out_dir, nodes, nodelist, wait)
    if verdict is None:
        return
    if verdict == {}:
        ctx.exit(EXIT_FAILED)
    console.print(f"wrote {Path(out_dir) / check.PREFLIGHT_FILE}")
    if save_baseline:
        shutil.copyfile(Path(out_dir) / check.PREFLIGHT_FILE, save_baseline)
        console.print(f"wrote {save_baseline}")
    records = ResultStore(out_dir).records()
    rows = report(out_dir, records)[0] if records else []
    console.print(f"wrote {write_html(out_dir, rows, records)}")
    print_verdict(verdict)
    if verdict["flagged"]:
        ctx.exit(EXIT_FAILED)
