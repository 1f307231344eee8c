"""``--backend slurm`` for ``sweep`` and ``run``: what to submit, and waiting for it."""

from __future__ import annotations

import dataclasses
import time
from typing import Dict, List, Optional

from rich.console import Console

from scaling.cell import Cell
from scaling.errors import ScalingError
from scaling.execute.monitor import WatchSettings
from scaling.execute.runner import progress_bar
from scaling.execute.store import ResultStore
from scaling.slurm.allocation import submit_allocation
from scaling.slurm.queue import (IN_FLIGHT, NOT_RUN, OUTAGE_PATIENCE_S, UNFINISHED, finished,
                                 patiently, poll)
from scaling.slurm.submit import require_slurm, submit_cells
from scaling.sweep import SlurmSection

POLL_S = 3.0


def with_overrides(section: Optional[SlurmSection], **flags) -> SlurmSection:
    """The sweep's ``slurm:`` section with the command line's flags (those given) on top."""
    section = section or SlurmSection()
    given = {key: value for key, value in flags.items() if value not in (None, ())}
    for listed in ("extra_args", "exclude"):
        if listed in given:
            given[listed] = [*getattr(section, listed), *given[listed]]
    return dataclasses.replace(section, **given)


def to_submit(cells: List[Cell], out_dir) -> List[Cell]:
    """Cells with no record whose array task is not pending, running or missing."""
    require_slurm()
    recorded = ResultStore(out_dir).done()
    states = poll(out_dir)
    return [cell for cell in cells if cell.cell_id not in recorded
            and states.get(cell.cell_id, {}).get("state") not in IN_FLIGHT]


def submit(cells: List[Cell], out_dir, section: SlurmSection, label: str,
           pythons: Dict[str, str], watch: WatchSettings, console: Console) -> None:
    todo = to_submit(cells, out_dir)
    jobs = submit_cells(todo, out_dir, section, label, pythons, watch, cells) if todo else []
    console.print(f"{label}: {len(cells)} cells, {len(cells) - len(todo)} recorded or queued, "
                  f"{len(todo)} submitted in {len(jobs)} job array(s)" +
                  (f": {', '.join(job['job_id'] for job in jobs)}" if jobs else ""))


def submit_one_allocation(cells: List[Cell], out_dir, section: SlurmSection, label: str,
                          pythons: Dict[str, str], watch: WatchSettings, console: Console,
                          preflight: Optional[Dict] = None) -> None:
    """The cells to run (:func:`to_submit`) as one allocation, checked first by ``preflight``
    where given."""
    todo = to_submit(cells, out_dir)
    job = submit_allocation(todo, out_dir, section, label, pythons, watch, preflight) \
        if todo else None
    console.print(f"{label}: {len(cells)} cells, {len(cells) - len(todo)} recorded or queued, "
                  f"{len(todo)} submitted" + (f" in one allocation of {job['nodes']} node(s): "
                                              f"{job['job_id']}" if job else ""))


def wait(out_dir, cell_ids: List[str], console: Console, poll_s: float = POLL_S,
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
