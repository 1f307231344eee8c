"""Where cells run: ``--backend local`` (here, one after another) or ``--backend slurm`` (job
arrays, or one allocation for a whole sweep), each a plug-in of one registry that ``run``,
``sweep`` and ``maxbatch`` look up."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List, Optional

import click
from rich.console import Console

from scaling.cell import Cell
from scaling.cli.output import console, print_max_batches
from scaling.errors import ScalingError
from scaling.execute.ceiling import describe_ceiling, ensure_cells_ceilings
from scaling.execute.monitor import WatchSettings
from scaling.execute.runner import pending_cells, run_cells
from scaling.execute.store import ResultStore
from scaling.maxbatch.search import MAXBATCH_FILE, find_max_batches, read_maxbatch_csv
from scaling.maxbatch.sweep import search_max_batches
from scaling.placement import Placement
from scaling.registry import Registry
from scaling.sweep import SlurmSection, SweepConfig, expand, interpreters


class Backend:
    """How a backend runs one cell, a sweep's cells and a max-batch search."""

    name: str
    help: str

    def cores(self, slurm: Dict, section: Optional[SlurmSection] = None) -> Optional[int]:
        """The cores of the machine that cells run on, which a CPU device's default threads
        divide; None for this machine's."""
        return None

    def run(self, cell: Cell, out_dir, pythons: Dict[str, str], watch: WatchSettings,
            placement: Optional[Placement], slurm: Dict, wait: bool) -> Optional[Dict]:
        """The cell's record (this node's part over several nodes), or None when it was only
        submitted."""
        raise NotImplementedError

    def sweep(self, spec: SweepConfig, out_dir, watch: WatchSettings, slurm: Dict,
              wait: bool) -> List[Cell]:
        """Run or submit the sweep's cells and return them."""
        raise NotImplementedError

    def maxbatch(self, search: Dict, fields: Dict, out_dir, slurm: Dict,
                 wait: bool) -> Optional[List[str]]:
        """``search``: the arguments of :func:`scaling.maxbatch.search.find_max_batches`;
        ``fields``: the command's cell fields. The status of each device count's search
        (``ok``, or that of the trial that stopped it), or None when it was only submitted."""
        raise NotImplementedError


BACKENDS: Registry[Backend] = Registry("backend")


def register_backend(cls):
    BACKENDS.register(cls.name, cls())
    return cls


progress = Console(stderr=True)
"""Where the work before the cells says what it did, beside the progress bar (standard error),
so that standard output holds the results alone."""


def measure_ceilings(out_dir, cells: List[Cell], pythons: Dict[str, str]) -> None:
    """The CPU matmul ceilings that ``cells`` divide by, measured on this machine before they
    run where the folder has none, each said on the console."""
    for entry in ensure_cells_ceilings(out_dir, cells, pythons):
        progress.print(describe_ceiling(entry))


@register_backend
class Local(Backend):
    name = "local"
    help = "local: run here, one cell after another"

    def run(self, cell, out_dir, pythons, watch, placement, slurm, wait) -> Optional[Dict]:
        measure_ceilings(out_dir, [cell], pythons)
        [record] = run_cells([cell], out_dir, pythons, placement=placement, watch=watch)
        return record

    def sweep(self, spec, out_dir, watch, slurm, wait) -> List[Cell]:
        max_batches = None
        if spec.needs_max_batch():
            max_batches, found = search_max_batches(spec, out_dir, console)
            print_max_batches(found, out_dir)
        cells = expand(spec, max_batches)
        several = sorted({cell.nodes for cell in cells if cell.nodes > 1})
        if several:
            raise ScalingError(f"cells on {', '.join(map(str, several))} nodes need a "
                               "scheduler: use --backend slurm (or scaling run --nodes on each "
                               "node)")
        todo = pending_cells(cells, out_dir)
        console.print(f"{spec.name}: {len(cells)} cells, {len(cells) - len(todo)} already "
                      f"recorded, output in {out_dir}")
        measure_ceilings(out_dir, todo, interpreters(spec))
        run_cells(todo, out_dir, interpreters(spec), watch=watch)
        return cells

    def maxbatch(self, search, fields, out_dir, slurm, wait) -> Optional[List[str]]:
        results = find_max_batches(**search)
        print_max_batches(results, out_dir)
        return [result.status for result in results]


@register_backend
class Slurm(Backend):
    name = "slurm"
    help = ("slurm: submit job arrays, one task per cell, and return (see --wait, scaling "
            "status)")

    def cores(self, slurm, section=None) -> Optional[int]:
        """The compute nodes' CPUs (the smallest node's), not the submitting host's."""
        from scaling.slurm import backend, controller

        backend.require_slurm()
        return controller.node_cpus(backend.with_overrides(section, **slurm).partition)

    def run(self, cell, out_dir, pythons, watch, placement, slurm, wait) -> Optional[Dict]:
        from scaling.slurm import backend

        backend.submit([cell], out_dir, backend.with_overrides(None, **slurm), "run", pythons,
                       watch, console)
        if not wait:
            return None
        backend.wait(out_dir, [cell.cell_id], console)
        return ResultStore(out_dir).done()[cell.cell_id]

    def sweep(self, spec, out_dir, watch, slurm, wait) -> List[Cell]:
        from scaling.slurm import backend

        if spec.needs_max_batch():
            raise ScalingError("batch_sizes: max searches on this machine: run that sweep with "
                               "--backend local, or give numeric batch sizes")
        slurm = dict(slurm)
        preflight = slurm.pop("preflight_check", None)
        cells = expand(spec, cores=self.cores(slurm, spec.slurm))
        section = backend.with_overrides(spec.slurm, **slurm)
        if section.allocation == "one":
            backend.submit_one_allocation(cells, out_dir, section, spec.name, interpreters(spec),
                                          watch, console, preflight)
        else:
            backend.submit(cells, out_dir, section, spec.name, interpreters(spec), watch,
                           console)
        if wait:
            backend.wait(out_dir, [cell.cell_id for cell in cells], console)
        return cells

    def maxbatch(self, search, fields, out_dir, slurm, wait) -> Optional[List[str]]:
        """The whole search as one job on one node: its trials depend on each other."""
        from scaling.slurm import backend, queue
        from scaling.slurm.submit import submit_command

        section = backend.with_overrides(None, **slurm)
        counts = search["device_counts"]
        gpu = fields["device_type"] == "gpu"
        out = str(Path(out_dir).resolve())
        job = submit_command([*sys.argv[1:], "--out", out, "--backend", "local"], out, section,
                             "maxbatch", max(counts) if gpu else None,
                             section.cpus_per_task or max(counts)
                             * (fields["threads_per_device"] or 1))
        console.print(f"max-batch search submitted as Slurm job {job['job_id']}")
        if not wait:
            return None
        state = queue.wait_for_job(job["job_id"], backend.POLL_S)
        console.print(f"job {job['job_id']} ended {state['JobState'] if state else 'unknown'}")
        if not (Path(out) / MAXBATCH_FILE).exists():
            raise click.exceptions.Exit(1)
        rows = read_maxbatch_csv(out)
        print_max_batches(rows, out_dir=None)
        searched = {(t.framework, t.launcher, t.workload, str(t.devices))
                    for t in (search["make_trial"](n, search["minimum"], 0) for n in counts)}
        return [row["status"] for row in rows
                if (row["framework"], row["launcher"], row["workload"], row["devices"])
                in searched]


def backend_option(command):
    """``--backend NAME``, from the registry."""
    return click.option(
        "--backend", type=click.Choice(BACKENDS.names()), default="local", show_default=True,
        help="; ".join(BACKENDS.get(name).help for name in BACKENDS.names()) + ".")(command)

