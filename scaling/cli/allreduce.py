"""``scaling allreduce``: collective bandwidth by message size, through a launcher's own
allreduce."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from scaling.cell import DEVICE_TYPES, make_cell
from scaling.backends import backend_option, open_backend
from scaling.cli.options import (ALLOW_OVERSUBSCRIBE, pop_scheduler_flags, scheduler_options,
                                 watch_settings)
from scaling.cli.output import console, prepare_out_dir
from scaling.errors import EXIT_FAILED, ScalingError
from scaling.execute import allreduce as bench
from scaling.execute.store import ResultStore
from scaling.frameworks import FRAMEWORKS, framework_names
from scaling.launchers import LAUNCHERS, get_launcher
from scaling.units import format_bytes

PLACEHOLDER_WORKLOAD = "mnist_mlp"
"""An allreduce cell names a workload only because every cell does; it builds no model."""


def marks_near(size: int, found: dict) -> str:
    """The marks that round to ``size`` on the 4x grid of sizes."""
    return ", ".join(f"{label} ({format_bytes(mark)})" for label, mark in found.items()
                     if size / 2 < mark <= size * 2)


def print_rows(rows, found) -> None:
    table = Table(title="Allreduce (float32 sum): median time per call, bandwidth in GB/s")
    for header in ("launcher", "devices", "size", "time", "95% interval", "algbw", "busbw",
                   "near"):
        table.add_column(header, justify="left" if header in ("launcher", "near") else "right")
    for row in rows:
        where = f"{row['total_devices']}" + (f" ({row['nodes']} nodes)" if row["nodes"] > 1
                                             else "")
        low, high = row["time_s_ci95"] or (None, None)
        table.add_row(f"{row['framework']}/{row['launcher']}", where,
                      format_bytes(row["bytes"]), f"{row['time_s'] * 1e3:.3f} ms",
                      f"{low * 1e3:.3f}-{high * 1e3:.3f} ms" if low else "-",
                      f"{row['algbw_GBps']:.3f}", f"{row['busbw_GBps']:.3f}",
                      marks_near(row["bytes"], found))
    console.print(table)


@click.command()
@click.option("--framework", type=click.Choice(framework_names()), default="torch",
              show_default=True)
@click.option("--launcher", type=click.Choice(LAUNCHERS.names()),
              help="Whose collective [default: the framework's: " + ", ".join(
                  f"{name} {fw.default_launcher}" for name, fw in FRAMEWORKS.items()) + "].")
@click.option("--devices", type=int, default=2, show_default=True, help="Devices per node.")
@click.option("--nodes", type=int, default=1, show_default=True,
              help="Nodes (more than one with --backend slurm).")
@click.option("--device-type", type=click.Choice(DEVICE_TYPES), default="auto",
              show_default=True, help="auto: GPUs if there are any, else CPU workers.")
@click.option("--threads-per-device", type=int,
              help="CPU threads per worker [default: cores // devices, at least 1].")
@click.option("--sizes", help="Comma-separated message sizes, such as 4KiB,1MiB,64MiB "
                              "[default: 4 KiB to 256 MiB in steps of 4x].")
@click.option("--repeat", type=int, default=0, show_default=True,
              help="Repeat index; a recorded measurement runs again only under a new index.")
@click.option("--timeout", "timeout_s", type=float, default=600, show_default=True,
              help="Seconds before the processes are killed.")
@click.option("--python", help="Interpreter for the workers [default: the framework's].")
@click.option("--out", "out_dir", default="runs/allreduce", show_default=True,
              type=click.Path(file_okay=False))
@ALLOW_OVERSUBSCRIBE
@backend_option
@scheduler_options
@click.pass_context
def allreduce(ctx, framework, launcher, sizes, python, out_dir, backend, wait, **fields):
    """Time a float32 sum-allreduce over the devices through the launcher's own collective
    (torch.distributed under torchrun, Horovod, an MXNet kvstore, TensorFlow's cross-device
    ops under tf-mirrored and its collectives under tf-multiworker), at each size.

    Each size is checked (ones sum to the device count), warmed up and timed in 10 chunks;
    the figure is the median time of one call with a 95% interval, and the bandwidths follow
    nccl-tests: algbw = bytes / time, busbw = algbw x 2(n-1)/n. The table marks the sizes of
    each workload's gradients and of the launcher's gradient bucket. Records go to
    OUT/results.jsonl and, one line per size, OUT/allreduce.jsonl; a bandwidth plot to
    OUT/allreduce.png.

    Exits 0 when the measurement is ok, 1 when it ended otherwise, 2 for bad input, 3 when
    the environment failed. With --backend slurm it waits for the job."""
    from scaling.report.figures import allreduce_figure, save_png

    runner = open_backend(backend, pop_scheduler_flags(fields))
    launcher = launcher or FRAMEWORKS.get(framework).default_launcher
    if get_launcher(launcher).data_parallel == "none":
        raise ScalingError(f"{launcher} has no collective: it runs one device; choose a "
                           "data-parallel launcher")
    cell = make_cell(framework=framework, launcher=launcher, workload=PLACEHOLDER_WORKLOAD,
                     batch_size=1, steps=1, warmup=0, purpose="allreduce",
                     sizes=bench.parse_sizes(sizes), cores=runner.cores(),
                     **fields)
    placement = runner.placement(cell)
    prepare_out_dir(out_dir)
    store = ResultStore(out_dir)
    record = store.done().get(cell.cell_id)
    if record is not None:
        console.print(f"already measured in {out_dir}; pass --repeat N to measure again")
    else:
        record = runner.run(cell, out_dir, {framework: python} if python else {},
                            watch_settings(None, False), placement, True)
    records = store.records()
    console.print(f"wrote {bench.write_allreduce_jsonl(records, out_dir)}")
    if record["status"] != "ok":
        console.print(f"{record['status']}: {record['error']}")
        ctx.exit(EXIT_FAILED)
    found = bench.marks(launcher)
    print_rows(bench.allreduce_rows([record]), found)
    figure = allreduce_figure(bench.allreduce_rows(records), found)
    console.print(f"wrote {save_png(figure, Path(out_dir) / 'allreduce.png')}")
