"""``--backend slurm``: job arrays, one task per cell, or one allocation for a whole sweep;
waiting for them, their states, cancelling them, and the batch scripts' own commands. The one
module outside ``scaling.slurm`` that imports it."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import click

from scaling.backends.base import Backend, register_backend
from scaling.cell import Cell
from scaling.maxbatch.table import print_max_batches
from scaling.report.terminal import console
from scaling.errors import InfrastructureError, ScalingError
from scaling.execute.monitor import WatchSettings
from scaling.execute.runner import progress_bar
from scaling.execute.store import ResultStore
from scaling.maxbatch.search import MAXBATCH_FILE, read_maxbatch_csv
from scaling.sweep import SlurmSection, expand, interpreters
from scaling.slurm import controller, queue
from scaling.slurm.allocation import submit_allocation
from scaling.slurm.preflight import submit_preflight
from scaling.slurm.queue import (IN_FLIGHT, NOT_RUN, OUTAGE_PATIENCE_S, POLL_S, UNFINISHED,
                                 finished, patiently, poll)
from scaling.slurm.submit import read_ledger, require_slurm, submit_cells, submit_command


@register_backend
class Slurm(Backend):
    name = "slurm"
    help = ("slurm: submit job arrays, one task per cell, and return (see --wait, scaling "
            "status)")
    one_allocation = True

    def section(self, spec_section: Optional[SlurmSection] = None) -> SlurmSection:
        """The sweep's ``slurm:`` section with the command line's flags (those given) on top."""
        section = spec_section or SlurmSection()
        given = {key: value for key, value in self.flags.items()
                 if key in SlurmSection.__dataclass_fields__}
        for listed in ("extra_args", "exclude"):
            if listed in given:
                given[listed] = [*getattr(section, listed), *given[listed]]
        return dataclasses.replace(section, **given)

    def cores(self, section=None) -> Optional[int]:
        """The compute nodes' CPUs (the smallest node's), not the submitting host's."""
        require_slurm()
        return controller.node_cpus(self.section(section).partition)

    def run(self, cell, out_dir, pythons, watch, placement, wait) -> Optional[Dict]:
        if not wait:
            submit([cell], out_dir, self.section(), "run", pythons, watch)
            return None
        record = self.one_job(cell, out_dir, self.section(), "run", pythons, watch)
        if record is None:
            raise InfrastructureError(f"Slurm never ran cell {cell.cell_id}: scaling status "
                                      f"{out_dir} says why")
        return record

    def run_trial(self, cell, out_dir) -> Optional[Dict]:
        """The trial as a one-task job, waited for; None where Slurm never ran it."""
        return self.one_job(cell, out_dir, self.section(), "run", {}, WatchSettings())

    def run_on(self, cell, out_dir, node) -> Optional[Dict]:
        """A one-task job kept off every other node of the partition, waited for (``node``:
        the point's nodes, joined by commas)."""
        section = self.section()
        others = [name for name in controller.node_names(section.partition)
                  if name not in node.split(",")]
        return self.one_job(cell, out_dir, dataclasses.replace(
            section, exclude=[*section.exclude, *others]), "confirm", {}, WatchSettings())

    def one_job(self, cell, out_dir, section: SlurmSection, label: str,
                pythons: Dict[str, str], watch) -> Optional[Dict]:
        """``cell`` as a one-task job array, waited for: its record, or None where Slurm never
        ran it."""
        submit([cell], out_dir, section, label, pythons, watch)
        wait_for(out_dir, [cell.cell_id])
        return ResultStore(out_dir).done().get(cell.cell_id)

    def sweep(self, spec, out_dir, watch, wait):
        if spec.needs_max_batch():
            self.search_here("run that sweep")
        cells = expand(spec, cores=self.cores(spec.slurm))
        section = self.section(spec.slurm)
        if section.allocation == "one":
            todo = to_submit(cells, out_dir)
            job = submit_allocation(todo, out_dir, section, spec.name, interpreters(spec),
                                    watch, self.flags.get("preflight_check")) if todo else None
            console.print(f"{spec.name}: {len(cells)} cells, {len(cells) - len(todo)} recorded "
                          f"or queued, {len(todo)} submitted" + (
                              f" in one allocation of {job['nodes']} node(s): {job['job_id']}"
                              if job else ""))
        else:
            submit(cells, out_dir, section, spec.name, interpreters(spec), watch)
        if wait:
            wait_for(out_dir, [cell.cell_id for cell in cells])
        return cells, wait

    def maxbatch(self, search, fields, out_dir, wait) -> Optional[List[str]]:
        """The whole search as one job on one node: its trials depend on each other."""
        section = self.section()
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
        state = queue.wait_for_job(job["job_id"], POLL_S)
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

    def preflight(self, check, out_dir, nodes, nodelist, wait) -> Optional[Dict]:
        """The nodes in one job: each measures itself, then every pair of them an allreduce."""
        return submit_preflight(check, out_dir, self.section(), nodes, nodelist, wait, console)

    def preflight_sweep(self, spec, out_dir, check) -> Optional[Dict]:
        """The partition's nodes in one job, those flagged then excluded; in one allocation
        the allocation's first step instead."""
        section = self.section(spec.slurm)
        if section.allocation == "one":
            self.flags["preflight_check"] = check
            return None
        names = [name for name in controller.node_names(section.partition)
                 if name not in section.exclude]
        verdict = submit_preflight(check, out_dir, section, len(names), ",".join(names), True,
                                   console)
        if verdict:
            self.flags["exclude"] = tuple(verdict["flagged"])
        return verdict

    def submitted(self, out_dir) -> bool:
        return bool(read_ledger(out_dir))

    def status(self, out_dir, wait) -> Dict[str, Dict]:
        require_slurm()
        if wait:
            return wait_for(out_dir, queue.submitted(out_dir))
        return poll(out_dir)

    def cancel(self, out_dir) -> Dict[str, Dict]:
        require_slurm()
        return queue.cancel(out_dir)


def to_submit(cells: List[Cell], out_dir) -> List[Cell]:
    """Cells with no record whose array task is not pending, running or missing."""
    require_slurm()
    recorded = ResultStore(out_dir).done()
    states = poll(out_dir)
    return [cell for cell in cells if cell.cell_id not in recorded
            and states.get(cell.cell_id, {}).get("state") not in IN_FLIGHT]


def submit(cells: List[Cell], out_dir, section: SlurmSection, label: str,
           pythons: Dict[str, str], watch) -> None:
    todo = to_submit(cells, out_dir)
    jobs = submit_cells(todo, out_dir, section, label, pythons, watch, cells) if todo else []
    console.print(f"{label}: {len(cells)} cells, {len(cells) - len(todo)} recorded or queued, "
                  f"{len(todo)} submitted in {len(jobs)} job array(s)" +
                  (f": {', '.join(job['job_id'] for job in jobs)}" if jobs else ""))


def wait_for(out_dir, cell_ids: List[str], poll_s: float = POLL_S,
             patience_s: float = OUTAGE_PATIENCE_S) -> Dict:
    """Poll until every one of ``cell_ids`` has a final status; a progress bar meanwhile. A
    poll that cannot ask the controller is asked again, for up to ``patience_s``."""
    with progress_bar(console) as progress:
        task = progress.add_task("slurm", total=len(cell_ids))
        while True:
            states = {cell_id: state for cell_id, state
                      in patiently(lambda: poll(out_dir), poll_s, patience_s).items()
                      if cell_id in cell_ids}
            unsubmitted = [c for c, s in states.items() if s["state"] == "unsubmitted"]
            if unsubmitted or len(states) < len(cell_ids):
                raise ScalingError(f"{len(cell_ids) - finished(states)} cells of {out_dir} are "
                                   "not submitted; run the sweep again with --resume")
            running = sum(s["state"] == "running" for s in states.values())
            progress.update(task, completed=finished(states),
                            description=f"slurm: {running} running")
            if all(s["state"] not in UNFINISHED for s in states.values()):
                left = sum(s["state"] == NOT_RUN for s in states.values())
                if left:
                    console.print(f"{left} cells were not run: their allocation ended first; "
                                  "run the sweep again with --resume")
                return states
            time.sleep(poll_s)


@click.command(name="slurm-task", hidden=True)
@click.argument("out_dir")
@click.argument("group_file")
@click.argument("index", type=int)
def slurm_task(out_dir, group_file, index):
    """Run cell INDEX of GROUP_FILE on this node of a Slurm allocation (batch scripts call it)."""
    from scaling.slurm.task import run_task

    record = run_task(out_dir, group_file, index)
    console.print(f"{record['cell']}: {record.get('status')}")
    sys.exit(record.get("exit_code", 0))


@click.command(name="slurm-allocation", hidden=True)
@click.argument("out_dir")
@click.argument("group_file")
def slurm_allocation(out_dir, group_file):
    """Run every unrecorded cell of GROUP_FILE, one srun step each, inside this whole-sweep
    allocation (its batch script calls it)."""
    from scaling.slurm.steps import run_allocation

    sys.exit(run_allocation(out_dir, group_file))


Slurm.commands = (slurm_task, slurm_allocation)
