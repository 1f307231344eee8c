"""``scaling devices`` (what this machine has) and ``scaling run`` (one cell)."""

from __future__ import annotations

from typing import Optional

import click
from rich.table import Table

from scaling import hardware
from scaling.cell import Cell, make_cell
from scaling.backends import backend_option, open_backend
from scaling.cli.output import console, prepare_out_dir, print_record
from scaling.cli.options import (HISTORY, add_to_history, apply, cell_options, history_later,
                                 parse_options, pop_scheduler_flags, scheduler_options,
                                 watch_options, watch_settings)
from scaling.errors import ScalingError, exit_status
from scaling.execute.store import ResultStore
from scaling.frameworks import FRAMEWORKS
from scaling.launchers import default_python, get_launcher, launchers_of
from scaling.maxbatch.search import PLAIN_CELL
from scaling.sweep import single_twin
from scaling.units import parse_bytes


@click.command()
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
    notes = []
    for python, wanted in framework_needs().items():
        packages = ["numpy", *dict.fromkeys(p for packages, _ in wanted.values() for p in packages)]
        versions = hardware.installed_versions(python, packages)
        if versions is None:
            table.add_row(python, "-", "not built yet")
            notes.append(f"not built yet: {python}; {next(iter(wanted.values()))[1]}")
            continue
        for package, version in versions.items():
            table.add_row(python, package, version)
        for what, (packages, hint) in wanted.items():
            if not versions.keys() & set(packages):
                table.add_row(python, what, "not installed")
                notes.append(f"not installed for {python}: {what}; {hint}")
    console.print(table)
    for note in notes:
        console.print(note, soft_wrap=True, markup=False)


def framework_needs() -> dict:
    """For each interpreter that runs some framework's workers: what it needs (a framework, or
    a launcher's own package), as its distributions (any one of them will do) and the command
    that installs or builds them."""
    needs: dict = {}
    for name in FRAMEWORKS:
        framework = FRAMEWORKS.get(name)
        for launcher_name in launchers_of(name):
            launcher = get_launcher(launcher_name)
            builds_venv = name in launcher.venvs and launcher.build_hint
            wanted = needs.setdefault(default_python(name, launcher_name), {})
            wanted.setdefault(name, (framework.packages, launcher.build_hint if builds_venv
                                     else framework.install_hint))
            if launcher.packages:
                wanted.setdefault(launcher_name, (launcher.packages,
                                                  launcher.build_hint or framework.install_hint))
    return needs


RUN_OPTIONS = [
    click.option("--devices", type=int, default=1, show_default=True, help="Devices per node."),
    click.option("--nodes", type=int, default=1, show_default=True,
                 help="Nodes; run the same command on each, with its --node-rank."),
    click.option("--node-rank", type=int, default=0, show_default=True,
                 help="This node's index when --nodes > 1."),
    click.option("--rendezvous", help="host:port where the ranks meet when --nodes > 1."),
    click.option("--hosts", help="Every node's address, comma-separated in node-rank order "
                                 "(needed by tf-multiworker over several nodes)."),
    click.option("--batch-size", type=int, required=True, help="Per-device batch size."),
    click.option("--repeat", type=int, default=0, show_default=True,
                 help="Repeat index; a cell already recorded runs again only under a new "
                      "index."),
    click.option("--min-time", "min_time_s", type=float, default=0.0, show_default=True,
                 help="Seconds the timed window lasts at least: after --steps it goes on by "
                      "whole chunks until it does."),
    click.option("--profile", is_flag=True,
                 help="After the window, run a few steps under the framework's profiler (a "
                      "trace per rank in the cell folder) and record the step's compute, "
                      "communication and idle fractions."),
    click.option("--references/--no-references", default=True, show_default=True,
                 help="After the window, time the references that the scaling model and the "
                      "input verdict rest on (local steps, the gradients' allreduce, the "
                      "real-data figures); --no-references: throughput alone."),
]


def folder_unit(out_dir, cell: Cell) -> Optional[int]:
    """Where ``cell`` takes its default threads and ``out_dir`` already holds sweep cells of
    its baseline (the same ``single`` twin: framework, workload, batch, image size, options,
    mode) with default threads of another count, that count: the device unit of the folder's
    curve, which the cell takes so that it joins that curve rather than start another. None
    otherwise."""
    if not cell.threads_default or cell.device_type != "cpu":
        return None
    twin = single_twin(cell).with_changes(repeat=0, threads_per_device=0).cell_id
    for record in ResultStore(out_dir).records():
        if record.get("purpose", "sweep") != "sweep" or not record.get("threads_default") \
                or record["threads_per_device"] == cell.threads_per_device:
            continue
        fields = {name: record[name] for name in Cell.__dataclass_fields__ if name in record}
        other = single_twin(Cell(**fields)).with_changes(repeat=0, threads_per_device=0)
        if other.cell_id == twin:
            return record["threads_per_device"]
    return None


@click.command()
@cell_options(**PLAIN_CELL, out="runs/run", what="cell")
@lambda command: apply(RUN_OPTIONS, command)
@watch_options
@backend_option
@scheduler_options
@HISTORY
@click.pass_context
def run(ctx, out_dir, python, memory_limit, option_pairs, node_rank, rendezvous, hosts,
        wait_for_quiet_s, no_telemetry, backend, wait, history_path, **fields):
    """Run one cell and append its result to OUT/results.jsonl.

    With --backend slurm, submit it as a one-task job array on --nodes nodes instead.

    Exits 0 when the cell is ok, 1 when it ended otherwise (oom, timeout, ...), 3 when its
    environment is missing (env_error); with --backend slurm and no --wait, 0 once it is
    submitted."""
    runner = open_backend(backend, pop_scheduler_flags(fields))
    settings = dict(memory_limit=parse_bytes(memory_limit) if memory_limit else None,
                    options=parse_options(option_pairs), cores=runner.cores(), **fields)
    cell = make_cell(**settings)
    unit = folder_unit(out_dir, cell)
    if unit is not None:
        try:
            cell = make_cell(**settings, default_threads=unit)
        except ScalingError as error:
            raise ScalingError(f"{out_dir} measures this curve with CPU devices of {unit} "
                               f"thread(s) each, the unit this run takes by default: "
                               f"{error}") from None
    if cell.data:
        runner.check_data(cell.data)
    placement = runner.placement(cell, node_rank, rendezvous, hosts.split(",") if hosts else None)
    prepare_out_dir(out_dir)
    recorded = ResultStore(out_dir).done().get(cell.cell_id)
    if recorded is not None:
        console.print(f"cell {cell.cell_id} is already recorded in {out_dir}; "
                      "pass --repeat N to measure it again")
    else:
        recorded = runner.run(cell, out_dir, {cell.framework: python} if python else {},
                              watch_settings(wait_for_quiet_s, no_telemetry), placement, wait)
        if recorded is None:
            if history_path:
                console.print(history_later(history_path, out_dir))
            return
    print_record(recorded)
    if history_path:
        add_to_history(history_path, out_dir)
    ctx.exit(exit_status([recorded["status"]]))
