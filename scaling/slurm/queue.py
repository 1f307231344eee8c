"""Where submitted cells stand: one ``squeue`` and one ``scontrol`` call per poll.

A cell with a record has its final status. Otherwise its array task is pending or running
(``squeue``), or it ended without a record and Slurm's state says why (``scontrol``, which keeps
finished jobs for ``MinJobAge``). Such a cell gets its record here:

- TIMEOUT -> ``timeout``; CANCELLED -> ``cancelled``; NODE_FAIL -> ``node_fail``;
- OUT_OF_MEMORY -> ``oom`` when a rank reported running out of memory, ``crashed`` otherwise;
- PREEMPTED -> ``preempted`` (submitted with ``--requeue``, a preempted task normally comes
  back as pending and runs again);
- any other end without a record -> ``crashed``, saying so.

The cells of a whole-sweep allocation (``slurm.allocation: one``) share its one task: they
are pending while it is, and while it runs the cell of its latest step is running and the rest
pending. Once it ended, a cell without a record is ``not_run``, left for ``--resume``: the
allocation was cancelled, requeued, timed out or vanished before it reached the cell, or it
ended while the cell ran (that cell alone gets the record Slurm's state gives, as an array
task's would, unless the allocation was cancelled, timed out or preempted, which says nothing
of the cell).

A task that neither ``squeue`` nor ``scontrol`` shows is ``missing`` until a later poll, at
least the vanish grace later, still does not show it; then ``sacct`` is asked (where the cluster
keeps accounting) and only a task that it does not know either is recorded ``crashed``, as
vanished from the controller. The time each task was first seen missing is kept in
``OUT/slurm/missing.json``, so two ``scaling status`` calls count as two polls. A poll whose
Slurm call failed raises :class:`InfrastructureError` and records nothing.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, TypeVar

from scaling.cell import Cell, describe
from scaling.errors import InfrastructureError, ScalingError
from scaling.execute.run import make_record
from scaling.execute.store import ResultStore, locked
from scaling.slurm import controller
from scaling.slurm.submit import SLURM_DIR, read_ledger, steps_started
from scaling.atomic import write_json_atomically

ACTIVE = {"PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending",
          "REQUEUE_HOLD": "pending", "REQUEUE_FED": "pending", "RESIZING": "pending",
          "SUSPENDED": "pending", "RUNNING": "running", "COMPLETING": "running",
          "STAGE_OUT": "running", "SIGNALING": "running"}
FINAL = {"TIMEOUT": "timeout", "CANCELLED": "cancelled", "NODE_FAIL": "node_fail",
         "PREEMPTED": "preempted", "DEADLINE": "timeout"}
UNFINISHED = ("pending", "running", "missing", "unsubmitted")
IN_FLIGHT = ("pending", "running", "missing")
"""States of a cell that is submitted and not to be submitted again."""
NOT_RUN = "not_run"
"""A cell of a whole-sweep allocation that ended before running it: no record, and ``--resume``
submits it again."""
CUT_SHORT = ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE")
"""Ends of a whole-sweep allocation that say nothing of the cell it was running."""

VANISH_GRACE_S = 120.0
"""How long a task must stay unseen, between two polls, before it counts as vanished."""
VANISH_GRACE_ENV = "SCALING_SLURM_VANISH_GRACE_S"
"""Overrides :data:`VANISH_GRACE_S`, in seconds."""
MISSING = "missing.json"
OUTAGE_PATIENCE_S = 600.0
"""How long waiting goes on asking a controller that does not answer."""
POLL_S = 3.0
"""Seconds between two polls of the controller while a command waits for its jobs."""
T = TypeVar("T")
log = logging.getLogger(__name__)


def vanish_grace_s() -> float:
    text = os.environ.get(VANISH_GRACE_ENV)
    if text is None:
        return VANISH_GRACE_S
    try:
        if float(text) >= 0:
            return float(text)
    except ValueError:
        pass
    raise ScalingError(f"{VANISH_GRACE_ENV} must be a number of seconds >= 0, got {text!r}")


def _rank_said_oom(cell_dir: Path) -> bool:
    for path in cell_dir.glob("rank*.json"):
        try:
            if json.loads(path.read_text()).get("status") == "oom":
                return True
        except (OSError, ValueError):
            continue
    return False


def final_outcome(fields: Optional[Dict], where: str, cell_dir: Path) -> Dict:
    """Status and one-line error of an array task that ended without a record (``fields``:
    what Slurm says of it; None: it vanished)."""
    if fields is None:
        return {"status": "crashed",
                "error": f"Slurm job {where} vanished from the controller without a record"}
    state, exit_code = fields["JobState"], fields.get("ExitCode", "?")
    reason = f", reason {fields['Reason']}" if "Reason" in fields else ""
    said = f"Slurm job {where} ended {state} (exit code {exit_code}{reason})"
    if state == "OUT_OF_MEMORY":
        return {"status": "oom" if _rank_said_oom(cell_dir) else "crashed",
                "error": f"{said}: the job went over its memory allocation"}
    if state in FINAL:
        return {"status": FINAL[state], "error": said}
    return {"status": "crashed", "error": f"{said} without writing a record"}


class Poll:
    """One poll of a folder: what Slurm says of its jobs, what the folder has recorded, and
    the tasks it has seen missing (by ``JOB_INDEX``, since when)."""

    def __init__(self, out_dir, grace_s: float):
        self.out_dir, self.grace_s, self.now = Path(out_dir), grace_s, time.time()
        self.ledger = read_ledger(out_dir)
        self.queued = controller.squeue_tasks(set(self.ledger))
        self.remembered, self.names = controller.scontrol_jobs()
        self.store = ResultStore(out_dir)
        self.recorded = self.store.done()
        path = self.out_dir / SLURM_DIR / MISSING
        self.seen_missing = json.loads(path.read_text()) if path.exists() else {}
        self.missing: Dict[str, float] = {}
        self.ended: Dict[str, Optional[Dict]] = {}
        """Tasks that ended without a record: what Slurm says of each, None if it vanished."""
        self.cells: Dict[str, Dict] = {}
        """The fields of every submitted cell, by cell id."""

    def states(self) -> Dict[str, Dict]:
        states = {}
        for name, job in self.ledger.items():
            job_id = job["job_id"] or self.names.get(name)
            group = json.loads(Path(job["group_file"]).read_text()).get("cells", [])
            for index, (cell_id, fields) in enumerate(zip(job["cells"], group)):
                one = job.get("allocation") == "one"
                if cell_id in self.recorded:
                    state = self.recorded[cell_id]["status"]
                elif job_id is None:
                    state = "unsubmitted"
                elif one:
                    state = self.allocation_state(name, job_id, cell_id)
                else:
                    state = self.task_state(job_id, index)
                self.cells[cell_id] = fields
                states[cell_id] = {"state": state, "what": describe(fields),
                                   "job": f"{job_id}_{0 if one else index}" if job_id else None,
                                   "allocation": job.get("allocation", "array")}
        return states

    def allocation_state(self, name: str, job_id: str, cell_id: str) -> str:
        """The state of an unrecorded cell of the whole-sweep allocation ``name``."""
        state = self.task_state(job_id, 0)
        started = steps_started(self.out_dir, name)
        latest = started[-1] if started else None
        if state == "running":
            return "running" if latest == cell_id else "pending"
        if state != "ended":
            return state
        said = self.ended[f"{job_id}_0"]
        if said is None or said["JobState"] in CUT_SHORT or latest != cell_id:
            return NOT_RUN
        return "ended"

    def task_state(self, job_id: str, index: int) -> str:
        """``pending``, ``running``, ``missing`` or ``ended`` (noted in :attr:`ended`)."""
        where = f"{job_id}_{index}"
        if (job_id, index) in self.queued:
            return ACTIVE.get(self.queued[(job_id, index)], "running")
        fields = self.remembered.get((job_id, index))
        if fields is None:
            if not self._vanished(where):
                return "missing"
            fields = controller.sacct_task(where)
        if fields is not None and fields["JobState"] in ACTIVE:
            return ACTIVE[fields["JobState"]]
        self.ended[where] = fields
        self.missing.pop(where, None)
        return "ended"

    def _vanished(self, where: str) -> bool:
        """``where`` is unseen now; True when an earlier poll, at least the grace ago, did not
        see it either."""
        first = self.seen_missing.get(where, self.now)
        self.missing[where] = first
        return where in self.seen_missing and self.now - first >= self.grace_s


def poll(out_dir, grace_s: Optional[float] = None) -> Dict[str, Dict]:
    """Every submitted cell of ``out_dir``: {cell id: {"state", "job", "what"}}, where state is
    a final status, ``pending``, ``running``, ``missing`` or ``unsubmitted``. A cell that ended
    without a record gets its record now (appended once). Polls of one folder take turns."""
    grace_s = vanish_grace_s() if grace_s is None else grace_s
    path = Path(out_dir) / SLURM_DIR / MISSING
    with locked(path):
        now = Poll(out_dir, grace_s)
        states = now.states()
        for cell_id, state in states.items():
            if state["state"] == "ended":
                record = _record(out_dir, now.cells[cell_id], state["job"],
                                 now.ended[state["job"]])
                record["slurm"]["allocation"] = state["allocation"]
                now.store.append_once(record)
                state["state"] = now.store.done()[record["cell"]]["status"]
        if now.missing != now.seen_missing:
            write_json_atomically(path, now.missing)
    return states


def _record(out_dir, fields: Dict, where: str, said: Optional[Dict]) -> Dict:
    """The record of a cell whose array task ``where`` ended without one; ``said``: what Slurm
    says of the task, None when it vanished."""
    cell_dir = Path(out_dir) / "cells" / Cell(**fields).cell_id
    job_id, _, index = where.partition("_")
    return record_without_run(out_dir, fields, final_outcome(said, where, cell_dir),
                              {"job_id": job_id, "array_task_id": int(index)})


def record_without_run(out_dir, fields: Dict, outcome: Dict, slurm: Dict) -> Dict:
    """The record of a cell that ended without making one: ``outcome`` (status and error) and
    the ``slurm`` provenance known of it."""
    cell = Cell(**fields)
    cell_dir = Path(out_dir) / "cells" / cell.cell_id
    cell_dir.mkdir(parents=True, exist_ok=True)
    record = make_record(cell, cell_dir, outcome, [], None, 0.0, None)
    record["slurm"] = slurm
    return record


def patiently(ask: Callable[[], T], poll_s: float,
              patience_s: float = OUTAGE_PATIENCE_S) -> T:
    """``ask()``, asked again every ``poll_s`` while it raises :class:`InfrastructureError`
    (the controller is down or restarting) for up to ``patience_s``; a warning once."""
    failing_since = None
    while True:
        try:
            return ask()
        except InfrastructureError as error:
            if failing_since is None:
                failing_since = time.monotonic()
                log.warning("%s; asking again %s", error, "until it answers"
                            if patience_s == float("inf") else f"for up to {patience_s:g} s")
            elif time.monotonic() - failing_since > patience_s:
                raise
        time.sleep(poll_s)


def wait_for_job(job_id: str, poll_s: float) -> Optional[Dict]:
    """Until array job ``job_id``'s one task has ended; then what the controller says of it
    (None if it forgot it)."""
    while True:
        remembered, _ = patiently(controller.scontrol_jobs, poll_s)
        fields = remembered.get((job_id, 0))
        if fields is None or fields["JobState"] not in ACTIVE:
            return fields
        time.sleep(poll_s)


def submitted(out_dir) -> List[str]:
    """The ids of the cells the folder submitted, in the order of submission."""
    return [cell_id for job in read_ledger(out_dir).values() for cell_id in job["cells"]]


def active_job_ids(out_dir) -> List[str]:
    """Job ids of the folder's submissions that still have tasks in the queue."""
    ledger = read_ledger(out_dir)
    queued = {job for job, _ in controller.squeue_tasks(set(ledger))}
    _, names = controller.scontrol_jobs()
    ids = [job["job_id"] or names.get(name) for name, job in ledger.items()]
    return [job_id for job_id in ids if job_id in queued]


def cancel(out_dir, grace_s: float = 60.0) -> Dict[str, Dict]:
    """``scancel`` every job of the folder, wait for them to leave the queue, and record their
    unfinished cells as ``cancelled``. What counts is that the jobs leave the queue: scancel
    complains of a job that ended meanwhile."""
    ids = active_job_ids(out_dir)
    if ids:
        controller.run(["scancel", *ids], controller.UNREACHABLE)
    deadline = time.monotonic() + grace_s
    while active_job_ids(out_dir) and time.monotonic() < deadline:
        time.sleep(1)
    return poll(out_dir)


def finished(states: Dict[str, Dict]) -> int:
    return sum(state["state"] not in UNFINISHED for state in states.values())
