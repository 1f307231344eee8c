"""Where submitted cells stand: one ``squeue`` and one ``scontrol`` call per poll.

A cell with a record has its final status. Otherwise its array task is pending or running
(``squeue``), or it ended without a record and Slurm's state says why (``scontrol``, which keeps
finished jobs for ``MinJobAge``; ``sacct`` is not needed). Such a cell gets its record here:

- TIMEOUT -> ``timeout``; CANCELLED -> ``cancelled``; NODE_FAIL -> ``node_fail``;
- OUT_OF_MEMORY -> ``oom`` when a rank reported running out of memory, ``crashed`` otherwise;
- PREEMPTED -> ``preempted`` (submitted with ``--requeue``, a preempted task normally comes
  back as pending and runs again);
- any other end without a record, or a task that vanished from the controller -> ``crashed``,
  saying so.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from scaling.cell import Cell, describe
from scaling.execute.run import make_record
from scaling.execute.store import ResultStore
from scaling.slurm.submit import read_ledger

ACTIVE = {"PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending",
          "REQUEUE_HOLD": "pending", "REQUEUE_FED": "pending", "RESIZING": "pending",
          "SUSPENDED": "pending", "RUNNING": "running", "COMPLETING": "running",
          "STAGE_OUT": "running", "SIGNALING": "running"}
FINAL = {"TIMEOUT": "timeout", "CANCELLED": "cancelled", "NODE_FAIL": "node_fail",
         "PREEMPTED": "preempted", "DEADLINE": "timeout"}

_SQUEUE_ID = re.compile(r"^(\d+)_(\d+)$")
_FIELD = re.compile(r"\b(JobId|ArrayJobId|ArrayTaskId|JobName|JobState|Reason|ExitCode)=(\S*)")


def squeue_tasks() -> Dict[Tuple[str, int], str]:
    """(array job id, task index) -> Slurm state, for every array task in the queue."""
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T"], capture_output=True,
                         text=True).stdout
    tasks = {}
    for line in out.splitlines():
        job, _, state = line.partition("|")
        match = _SQUEUE_ID.match(job.strip())
        if match:
            tasks[(match.group(1), int(match.group(2)))] = state.strip()
    return tasks


def scontrol_jobs() -> Tuple[Dict[Tuple[str, int], Dict], Dict[str, str]]:
    """Every job the controller remembers: array tasks by (array job id, index), and array job
    ids by job name (to find a submission whose id was never noted)."""
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True,
                         text=True).stdout
    tasks, names = {}, {}
    for line in out.splitlines():
        fields = dict(_FIELD.findall(line))
        if "ArrayJobId" not in fields:
            continue
        names[fields.get("JobName", "")] = fields["ArrayJobId"]
        for index in task_indices(fields.get("ArrayTaskId", "")):
            tasks[(fields["ArrayJobId"], index)] = fields
    return tasks, names


def task_indices(text: str) -> List[int]:
    """``3`` -> [3]; ``2-4,7%2`` (tasks that never started, kept as one record) -> [2, 3, 4, 7]."""
    indices = []
    for part in text.split("%")[0].split(","):
        first, _, last = part.split(":")[0].partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            indices.extend(range(int(first), int(last or first) + 1))
    return indices


def _rank_said_oom(cell_dir: Path) -> bool:
    for path in cell_dir.glob("rank*.json"):
        try:
            if json.loads(path.read_text()).get("status") == "oom":
                return True
        except (OSError, ValueError):
            continue
    return False


def final_outcome(fields: Optional[Dict], where: str, cell_dir: Path) -> Dict:
    """Status and one-line error of an array task that ended without a record."""
    if fields is None:
        return {"status": "crashed",
                "error": f"Slurm job {where} vanished from the controller without a record"}
    state, exit_code = fields["JobState"], fields.get("ExitCode", "?")
    said = f"Slurm job {where} ended {state} (exit code {exit_code}, reason " \
           f"{fields.get('Reason', '?')})"
    if state == "OUT_OF_MEMORY":
        return {"status": "oom" if _rank_said_oom(cell_dir) else "crashed",
                "error": f"{said}: the job went over its memory allocation"}
    if state in FINAL:
        return {"status": FINAL[state], "error": said}
    return {"status": "crashed", "error": f"{said} without writing a record"}


def poll(out_dir) -> Dict[str, Dict]:
    """Every submitted cell of ``out_dir``: {cell id: {"state", "job", "what"}}, where state is
    a final status, ``pending``, ``running`` or ``unsubmitted``. A cell that ended without a
    record gets its record now (appended once)."""
    store = ResultStore(out_dir)
    queued = squeue_tasks()
    remembered, names = scontrol_jobs()
    recorded = store.done()
    states = {}
    for name, job in read_ledger(out_dir).items():
        job_id = job["job_id"] or names.get(name)
        group = json.loads(Path(job["group_file"]).read_text()).get("cells", [])
        for index, (cell_id, fields) in enumerate(zip(job["cells"], group)):
            where = f"{job_id}_{index}" if job_id else None
            if cell_id in recorded:
                state = recorded[cell_id]["status"]
            elif job_id is None:
                state = "unsubmitted"
            elif (job_id, index) in queued:
                state = ACTIVE.get(queued[(job_id, index)], "running")
            else:
                cell_dir = _ensure(Path(out_dir) / "cells" / cell_id)
                outcome = final_outcome(remembered.get((job_id, index)), where, cell_dir)
                record = make_record(Cell(**fields), cell_dir, outcome, [], None, 0.0, None)
                record["slurm"] = {"job_id": job_id, "array_task_id": index}
                store.append_once(record)
                state = store.done()[cell_id]["status"]
            states[cell_id] = {"state": state, "job": where, "what": describe(fields)}
    return states


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def wait_for_job(job_id: str, poll_s: float) -> Optional[Dict]:
    """Until ``job_id`` leaves the queue; then what the controller says of it (None if it
    forgot it)."""
    while any(job == job_id for job, _ in squeue_tasks()):
        time.sleep(poll_s)
    remembered, _ = scontrol_jobs()
    return remembered.get((job_id, 0))


def active_job_ids(out_dir) -> List[str]:
    """Job ids of the folder's submissions that still have tasks in the queue."""
    queued = {job for job, _ in squeue_tasks()}
    _, names = scontrol_jobs()
    ids = [job["job_id"] or names.get(name) for name, job in read_ledger(out_dir).items()]
    return [job_id for job_id in ids if job_id in queued]


def cancel(out_dir, grace_s: float = 60.0) -> Dict[str, Dict]:
    """``scancel`` every job of the folder, wait for them to leave the queue, and record their
    unfinished cells as ``cancelled``."""
    ids = active_job_ids(out_dir)
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, text=True)
    deadline = time.monotonic() + grace_s
    while active_job_ids(out_dir) and time.monotonic() < deadline:
        time.sleep(1)
    return poll(out_dir)


UNFINISHED = ("pending", "running", "unsubmitted")


def counts(states: Dict[str, Dict]) -> Dict[str, int]:
    found: Dict[str, int] = {}
    for state in states.values():
        found[state["state"]] = found.get(state["state"], 0) + 1
    return found


def finished(states: Dict[str, Dict]) -> int:
    return sum(state["state"] not in UNFINISHED for state in states.values())
