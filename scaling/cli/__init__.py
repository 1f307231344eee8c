"""The ``scaling`` command line."""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Dict

import click
import yaml
from rich.table import Table

from scaling import __version__, hardware
from scaling.cell import DEVICE_TYPES, MODES, make_cell, resolve_device_type
from scaling.cli import analysis as cli_analysis
from scaling.cli import slurm as cli_slurm
from scaling.cli.output import console, prepare_out_dir
from scaling.errors import InfrastructureError, ScalingError
from scaling.execute.monitor import NOISE_CORES, WatchSettings
from scaling.execute.runner import check_resumable, pending_cells, run_cells
from scaling.execute.store import ResultStore
from scaling.frameworks import FRAMEWORKS, framework_names
from scaling.launchers import LAUNCHERS, default_python, get_launcher, launchers_of
from scaling.maxbatch.bracket import STRATEGIES
from scaling.maxbatch.search import (MAXBATCH_FILE, TrialRunner, check_search_bounds,
                                     find_max_batches, read_maxbatch_csv, trial_factory,
                                     write_maxbatch_csv)
from scaling.maxbatch.sweep import search_max_batches
from scaling.placement import local_placement
from scaling.report.provenance import keep_sweep_file
from scaling.report.tables import cost_tables, report, scaling_tables, thread_tables
from scaling.sweep import expand, interpreters, load_sweep
from scaling.units import format_bytes, parse_bytes
from workloads import WORKLOADS


class ScalingGroup(click.Group):
    """Reports a :class:`ScalingError` as one line, ``Error: ...``, with no traceback: exit
    status 2 for bad input, 3 when the environment or infrastructure failed."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InfrastructureError as error:
            click.echo(f"Error: {error}", err=True)
            ctx.exit(error.exit_code)
        except ScalingError as error:
            raise click.UsageError(str(error)) from None


@click.group(cls=ScalingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="scaling")
def cli():
    """Measure how training throughput (images/sec) scales with the number of devices.

    A cell is one measurement: a framework and launcher, a workload, a device count and a
    per-device batch size. Cells run in fresh processes under a timeout, here or through Slurm
    (--backend slurm); each one ends with a status (ok, oom, timeout, crashed, error,
    env_error, ...) and is appended to OUT/results.jsonl.

    Exit status: 0 when every cell got a status (for `run`: when its cell is ok), 1 when the
    cell of `run` is not ok or `compare` found a regression, 2 for bad input.
    """


@cli.command()
def devices():
    """List GPUs (the fields nvidia-smi shows), the CPU, and installed frameworks."""
    gpus = hardware.query_gpus()
    if gpus:
        table = Table(title="GPUs")
        for key in gpus[0]:
            table.add_column(key)
        for gpu in gpus:
            table.add_row(*gpu.values())
        console.print(table)
    else:
        console.print("GPUs: none found (nvidia-smi absent or reports no device)")
    console.print(f"CPU: {hardware.cpu_model()}, {hardware.cpu_cores()} cores")
    table = Table(title="Frameworks")
    for header in ("interpreter", "package", "version"):
        table.add_column(header)
    pythons = dict.fromkeys(default_python(name, launcher) for name in FRAMEWORKS
                            for launcher in launchers_of(name))
    for python in pythons:
        versions = hardware.installed_versions(python)
        if versions is None:
            table.add_row(python, "-", "not found")
        for package, version in (versions or {}).items():
            table.add_row(python, package, version)
    console.print(table)


def parse_options(pairs) -> dict:
    """``("xla=true", "mixed_precision=false")`` -> {"xla": True, "mixed_precision": False}."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ScalingError(f"--option takes KEY=VALUE, got {pair!r}")
        options[key] = yaml.safe_load(value)
    return options

def parse_prices(pairs) -> Dict[str, float]:
    """``("gpu=2.5", "cpu=0.05")`` -> {"gpu": 2.5, "cpu": 0.05}."""
    prices = {}
    for pair in pairs:
        key, sep, value = pair.rpartition("=")
        try:
            amount = float(value)
        except ValueError:
            amount = -1.0
        if not sep or not key or amount < 0:
            raise ScalingError(f"--price takes KEY=USD_PER_HOUR (KEY: cpu, gpu, a device name "
                               f"or instance), got {pair!r}")
        prices[key] = amount
    return prices


OPTION_HELP = ("Framework option KEY=VALUE, repeatable (torch: amp=true|fp16|bf16, "
               "channels_last, compile, cudnn_benchmark; TensorFlow: xla, mixed_precision; "
               "MXNet: amp, and kvstore under mxnet-kvstore).")


def _print_record(record) -> None:
    if "node_rank" in record:
        console.print(f"node {record['node_rank']}: this node's ranks ended {record['status']}"
                      f"{': ' + record['error'] if record['error'] else ''}; node 0 records "
                      "the cell")
    elif record["status"] == "ok":
        console.print(
            f"ok: {record['images_per_sec']:.1f} images/sec on {record['total_devices']} "
            f"{record['device_type']} device(s), global batch {record['global_batch_size']}, "
            f"median step {record['step_time_median_s'] * 1000:.1f} ms, "
            f"peak memory {format_bytes(record['peak_memory_bytes'])} per rank"
        )
    else:
        console.print(f"{record['status']}: {record['error']}")


ALLOW_OVERSUBSCRIBE = click.option(
    "--allow-oversubscribe", is_flag=True,
    help="Run even when CPU devices x threads exceed the cores (such results measure "
         "contention, not scaling).")


def watch_options(command):
    """``--wait-for-quiet [SECONDS]`` and ``--no-telemetry``, as a ``watch`` argument."""
    command = click.option(
        "--wait-for-quiet", "wait_for_quiet_s", type=float, is_flag=False, flag_value=60.0,
        default=None, metavar="[SECONDS]",
        help="Before each cell, wait up to SECONDS (60 if not given) until other processes use "
             f"at most {NOISE_CORES} cores; a cell that starts or runs in noise is recorded "
             "noisy either way.")(command)
    command = click.option(
        "--no-telemetry", is_flag=True,
        help="Do not sample the cell while it runs (CPU, memory and GPU use); its noise is "
             "then judged from a look at the machine just before it starts.")(command)
    return command


BACKENDS = ("local", "slurm")


def backend_options(command):
    """``--backend``, ``--wait`` and the Slurm resources, as ``backend``, ``wait`` and a
    ``slurm`` dict of flags."""
    flags = [
        click.option("--backend", type=click.Choice(BACKENDS), default="local",
                     show_default=True,
                     help="local: run here, one cell after another; slurm: submit job arrays, "
                          "one task per cell, and return (see --wait, scaling status)."),
        click.option("--wait", is_flag=True,
                     help="With --backend slurm: block, with a progress bar, until every cell "
                          "has ended."),
        click.option("--partition"), click.option("--account"), click.option("--qos"),
        click.option("--time", "time_limit", help="Slurm time limit per cell, e.g. 0:30:00."),
        click.option("--gpus-per-node", type=int), click.option("--cpus-per-task", type=int),
        click.option("--constraint"),
        click.option("--sbatch-arg", "extra_args", multiple=True,
                     help="Passed to sbatch as it is; repeatable."),
        click.option("--parallel", type=int,
                     help="At most this many array tasks of a job at once (%N)."),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


SLURM_FLAGS = ("partition", "account", "qos", "time_limit", "gpus_per_node", "cpus_per_task",
               "constraint", "extra_args", "parallel")


def pop_slurm_flags(fields: dict) -> dict:
    flags = {name: fields.pop(name) for name in SLURM_FLAGS}
    flags["time"] = flags.pop("time_limit")
    return flags


def watch_settings(wait_for_quiet_s, no_telemetry) -> WatchSettings:
    return WatchSettings(telemetry=not no_telemetry, wait_for_quiet_s=wait_for_quiet_s)


def cell_options(steps: int, warmup: int, out: str, what: str):
    """The options that ``run`` and ``maxbatch`` share: everything that defines a cell but its
    device count and batch size."""
    options = [
        click.option("--framework", type=click.Choice(framework_names()), default="torch",
                     show_default=True),
        click.option("--launcher", type=click.Choice(sorted(LAUNCHERS)),
                     help="How the ranks are started [default: the framework's: " + ", ".join(
                         f"{name} {fw.default_launcher}" for name, fw in FRAMEWORKS.items())
                     + "]."),
        click.option("--workload", required=True,
                     help=f"One of: {', '.join(sorted(WORKLOADS))}."),
        click.option("--image-size", type=int,
                     help="Square input side [default: the workload's]."),
        click.option("--steps", type=int, default=steps, show_default=True,
                     help=f"Timed steps per {what}."),
        click.option("--warmup", type=int, default=warmup, show_default=True,
                     help="Untimed steps first."),
        click.option("--mode", type=click.Choice(MODES), default="train", show_default=True,
                     help="train: forward, backward and optimizer step; forward: inference "
                          "only; forward_backward: no optimizer step."),
        click.option("--device-type", type=click.Choice(DEVICE_TYPES), default="auto",
                     show_default=True, help="auto: GPUs if there are any, else CPU workers."),
        click.option("--threads-per-device", type=int,
                     help="CPU threads per worker [default: cores // devices, at least 1]."),
        click.option("--memory-limit", help="Memory cap per CPU device, e.g. 3GiB."),
        click.option("--timeout", "timeout_s", type=float, default=600, show_default=True,
                     help=f"Seconds before a {what}'s processes are killed."),
        click.option("--option", "option_pairs", multiple=True, metavar="KEY=VALUE",
                     help=OPTION_HELP),
        click.option("--python", help="Interpreter for the workers [default: the framework's]."),
        click.option("--out", "out_dir", default=out, show_default=True,
                     type=click.Path(file_okay=False)),
        ALLOW_OVERSUBSCRIBE,
    ]

    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


@cli.command()
@cell_options(steps=20, warmup=5, out="runs/run", what="cell")
@click.option("--devices", type=int, default=1, show_default=True, help="Devices per node.")
@click.option("--nodes", type=int, default=1, show_default=True,
              help="Nodes; run the same command on each, with its --node-rank.")
@click.option("--node-rank", type=int, default=0, show_default=True,
              help="This node's index when --nodes > 1.")
@click.option("--rendezvous", help="host:port where the ranks meet when --nodes > 1.")
@click.option("--hosts", help="Every node's address, comma-separated in node-rank order "
                              "(needed by tf-multiworker over several nodes).")
@click.option("--batch-size", type=int, required=True, help="Per-device batch size.")
@click.option("--repeat", type=int, default=0, show_default=True,
              help="Repeat index; a cell already recorded runs again only under a new index.")
@click.option("--min-time", "min_time_s", type=float, default=0.0, show_default=True,
              help="Seconds the timed window lasts at least: after --steps it goes on by "
                   "whole chunks until it does.")
@click.option("--profile", is_flag=True,
              help="After the window, run a few steps under the framework's profiler (a trace "
                   "per rank in the cell folder) and record the step's compute, communication "
                   "and idle fractions.")
@watch_options
@backend_options
def run(out_dir, python, memory_limit, option_pairs, node_rank, rendezvous, hosts,
        wait_for_quiet_s, no_telemetry, backend, wait, **fields):
    """Run one cell and append its result to OUT/results.jsonl.

    With --backend slurm, submit it as a one-task job array on --nodes nodes instead.

    Exits 0 when the cell is ok and 1 when it ended otherwise (oom, timeout, ...); with
    --backend slurm and no --wait, 0 once it is submitted."""
    watch = watch_settings(wait_for_quiet_s, no_telemetry)
    flags = pop_slurm_flags(fields)
    cell = make_cell(memory_limit=parse_bytes(memory_limit) if memory_limit else None,
                     options=parse_options(option_pairs), **fields)
    if backend == "slurm":
        _run_on_slurm(cell, out_dir, python, watch, wait, flags)
        return
    placement = local_placement(get_launcher(cell.launcher).ranks_per_node(cell), cell.nodes,
                                node_rank, rendezvous, hosts.split(",") if hosts else None)
    prepare_out_dir(out_dir)
    recorded = ResultStore(out_dir).done().get(cell.cell_id)
    if recorded is not None:
        console.print(f"cell {cell.cell_id} is already recorded in {out_dir}; "
                      "pass --repeat N to measure it again")
        _print_record(recorded)
    else:
        [recorded] = run_cells([cell], out_dir, {cell.framework: python} if python else None,
                               placement=placement, watch=watch)
        _print_record(recorded)
    if recorded["status"] != "ok":
        sys.exit(1)


def _run_on_slurm(cell, out_dir, python, watch, wait, flags) -> None:
    from scaling.slurm import backend as slurm_backend

    prepare_out_dir(out_dir)
    slurm_backend.submit([cell], out_dir, slurm_backend.with_overrides(None, **flags), "run",
                         {cell.framework: python} if python else {}, watch, console)
    if wait:
        slurm_backend.wait(out_dir, [cell.cell_id], console)
        recorded = ResultStore(out_dir).done()[cell.cell_id]
        _print_record(recorded)
        if recorded["status"] != "ok":
            sys.exit(1)


def _device_list(text: str):
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ScalingError(f"--devices takes a comma-separated list such as 1,2,4,8, got {text!r}")
    if not counts or min(counts) <= 0:
        raise ScalingError(f"--devices must list positive counts, got {text!r}")
    return counts


def print_max_batches(results) -> None:
    table = Table(title="Largest per-device batch that fits")
    for header in ("framework", "launcher", "workload", "devices", "max batch", "smallest OOM",
                   "safe batch", "images/sec", "peak memory", "trials", "seconds", "status"):
        table.add_column(header, justify="right")
    for r in results:
        table.add_row(
            r.framework, r.launcher, r.workload, str(r.devices), str(r.max_batch or "-"),
            str(r.min_oom_batch or "-"), str(r.safe_batch or "-"),
            f"{r.images_per_sec:,.1f}" if r.images_per_sec else "-",
            format_bytes(r.peak_memory_bytes), str(r.trials), f"{r.seconds:.0f}",
            r.status if r.error is None else f"{r.status}: {r.error}",
        )
    console.print(table)


@cli.command()
@cell_options(steps=3, warmup=1, out="runs/maxbatch", what="trial")
@click.option("--devices", "device_list", default="1", show_default=True,
              help="Device counts to search, e.g. 1,2,4,8.")
@click.option("--min", "minimum", type=int, help="Starting batch [default: --multiple-of].")
@click.option("--max", "maximum", type=int, help="Largest batch worth trying.")
@click.option("--multiple-of", type=int, default=1, show_default=True,
              help="Granularity: every batch tried is a multiple of it.")
@click.option("--headroom", type=float,
              help="Also report a safe batch: this fraction of the largest, e.g. 0.9.")
@click.option("--strategy", type=click.Choice(sorted(STRATEGIES)), default="model",
              show_default=True,
              help="model: predict the limit from measured memory; doubling: double, bisect.")
@backend_options
def maxbatch(device_list, minimum, maximum, multiple_of, headroom, strategy, memory_limit,
             option_pairs, python, out_dir, backend, wait, **fields):
    """Find the largest per-device batch that fits at each device count.

    Each trial is a real cell under the real launcher (forward, backward and optimizer step).
    The search grows geometrically, then predicts the limit from the measured memory per sample
    and brackets it to the exact batch at the given granularity; the answer is run once more to
    confirm it. Trials are recorded in OUT/results.jsonl, so an interrupted search resumes
    without repeating one. The table is also written to OUT/maxbatch.csv.

    With --backend slurm, the whole search runs as one job on one node (its trials depend on
    each other); --wait blocks until it ends and prints the table.
    """
    flags = pop_slurm_flags(fields)
    counts = _device_list(device_list)
    prepare_out_dir(out_dir)
    cap = parse_bytes(memory_limit) if memory_limit else None
    fields["device_type"] = resolve_device_type(fields["device_type"])
    start = check_search_bounds(multiple_of, minimum, maximum, headroom, fields["device_type"],
                                cap)
    make_trial = trial_factory(memory_limit=cap, options=parse_options(option_pairs), **fields)
    for count in counts:
        make_trial(count, start, 0)
    if backend == "slurm":
        _maxbatch_on_slurm(out_dir, counts, fields, wait, flags)
        return
    runner = TrialRunner(out_dir, python, on_trial=lambda r: console.print(
        f"  trial: {r['devices']} device(s), batch {r['batch_size']}: {r['status']}"))
    results = find_max_batches(make_trial, counts, multiple_of, start, maximum, runner,
                               strategy, headroom)
    print_max_batches(results)
    console.print(f"wrote {write_maxbatch_csv(results, out_dir)}")


def _maxbatch_on_slurm(out_dir, counts, fields, wait, flags) -> None:
    from scaling.slurm import backend as slurm_backend
    from scaling.slurm import queue as slurm_queue
    from scaling.slurm.submit import submit_command

    section = slurm_backend.with_overrides(None, **flags)
    gpu = fields["device_type"] == "gpu"
    threads = fields["threads_per_device"] or 1
    out = str(Path(out_dir).resolve())
    job = submit_command([*sys.argv[1:], "--out", out, "--backend", "local"], out, section,
                         "maxbatch", max(counts) if gpu else None,
                         section.cpus_per_task or max(counts) * threads)
    console.print(f"max-batch search submitted as Slurm job {job['job_id']}")
    if wait:
        state = slurm_queue.wait_for_job(job["job_id"], slurm_backend.POLL_S)
        console.print(f"job {job['job_id']} ended {state['JobState'] if state else 'unknown'}")
        rows = read_maxbatch_csv(out) if (Path(out) / MAXBATCH_FILE).exists() else []
        table = Table(title="Largest per-device batch that fits")
        for header in (rows[0] if rows else {}):
            table.add_column(header)
        for row in rows:
            table.add_row(*(str(value) for value in row.values()))
        console.print(table)
        if not rows:
            sys.exit(1)


def _print_report(out_dir, prices=None) -> None:
    records = ResultStore(out_dir).records()
    if not records:
        raise ScalingError(f"no results in {out_dir}")
    rows, path = report(out_dir, records, prices)
    for table in [*scaling_tables(rows), *thread_tables(rows), *cost_tables(rows)]:
        console.print(table)
    console.print(f"wrote {path}")
    return rows


@cli.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder [default: runs/NAME].")
@click.option("--resume", is_flag=True, help="Skip the cells already recorded in OUT.")
@ALLOW_OVERSUBSCRIBE
@watch_options
@backend_options
def sweep(config, out_dir, resume, allow_oversubscribe, wait_for_quiet_s, no_telemetry,
          backend, wait, **slurm_flags):
    """Run every cell of the sweep file CONFIG, then print the scaling report.

    With --backend slurm, submit the cells as job arrays (one per group of cells that need the
    same resources) and return, or with --wait block until they end; --resume skips cells that
    are recorded or still queued.

    Exits 0 once every cell has a status (or, with --backend slurm and no --wait, once every
    cell is submitted), whatever the statuses are, and ends with a count of cells by status."""
    watch = watch_settings(wait_for_quiet_s, no_telemetry)
    spec = load_sweep(config)
    if allow_oversubscribe:
        spec.allow_oversubscribe = True
    out_dir = out_dir or f"runs/{spec.name}"
    prepare_out_dir(out_dir)
    check_resumable(out_dir, resume)
    keep_sweep_file(out_dir, config)
    if backend == "slurm":
        _sweep_on_slurm(spec, out_dir, watch, wait, pop_slurm_flags(slurm_flags))
        return
    max_batches = None
    if spec.needs_max_batch():
        max_batches, found = search_max_batches(spec, out_dir, console)
        print_max_batches(found)
        console.print(f"wrote {write_maxbatch_csv(found, out_dir)}")
    cells = expand(spec, max_batches)
    several = sorted({cell.nodes for cell in cells if cell.nodes > 1})
    if several:
        raise ScalingError(f"cells on {', '.join(map(str, several))} nodes need a scheduler: "
                           "use --backend slurm (or scaling run --nodes on each node)")
    todo = pending_cells(cells, out_dir)
    console.print(f"{spec.name}: {len(cells)} cells, {len(cells) - len(todo)} already recorded, "
                  f"output in {out_dir}")
    run_cells(todo, out_dir, interpreters(spec), watch=watch)
    _print_report(out_dir)
    _print_counts(cells, out_dir)


def _print_counts(cells, out_dir) -> None:
    recorded = ResultStore(out_dir).done()
    counts = Counter(recorded[cell.cell_id]["status"] for cell in cells
                     if cell.cell_id in recorded)
    console.print(f"{len(cells)} cells: " + ", ".join(
        f"{count} {status}" for status, count in counts.most_common()))


def _sweep_on_slurm(spec, out_dir, watch, wait, flags) -> None:
    from scaling.slurm import backend as slurm_backend

    if spec.needs_max_batch():
        raise ScalingError("batch_sizes: max searches on this machine: run that sweep with "
                           "--backend local, or give numeric batch sizes")
    section = slurm_backend.with_overrides(spec.slurm, **flags)
    cells = expand(spec)
    slurm_backend.submit(cells, out_dir, section, spec.name, interpreters(spec), watch, console)
    if wait:
        slurm_backend.wait(out_dir, [cell.cell_id for cell in cells], console)
        _print_report(out_dir)
        _print_counts(cells, out_dir)


@cli.command(name="report")
@click.argument("out_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--plot", is_flag=True,
              help="Also draw throughput, speedup and efficiency against device count as PNGs.")
@click.option("--html", is_flag=True,
              help="Also write OUT_DIR/report.html: one self-contained page with the grids, "
                   "figures, max-batch table and provenance.")
@click.option("--price", "price_pairs", multiple=True, metavar="KEY=USD_PER_HOUR",
              help="Price per device-hour of a device type (cpu, gpu) or device name, or per "
                   "node-hour of an instance (instance=...); repeatable; over the sweep's "
                   "prices:.")
def report_command(out_dir, plot, html, price_pairs):
    """Print the scaling tables of OUT_DIR and write OUT_DIR/results.csv with speedup and
    efficiency (weak scaling: per-device batch fixed, baseline = measured one device), and,
    where prices are known, the cost of a million images against the reference cell."""
    rows = _print_report(out_dir, parse_prices(price_pairs))
    if plot:
        from scaling.report.figures import plot_scaling

        for path in plot_scaling(rows, out_dir):
            console.print(f"wrote {path}")
    if html:
        from scaling.report.html import write_html

        console.print(f"wrote {write_html(out_dir, rows, ResultStore(out_dir).records())}")


for command in (cli_slurm.status, cli_slurm.cancel, cli_slurm.slurm_task, cli_analysis.matmul,
                cli_analysis.compare_command):
    cli.add_command(command)


def main() -> None:
    logging.basicConfig(format="warning: %(message)s", level=logging.WARNING, stream=sys.stderr)
    cli(prog_name="scaling")
