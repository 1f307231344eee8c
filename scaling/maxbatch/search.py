"""Find the largest per-device batch that fits, at each device count, under the real launcher.

Every trial is a real cell (purpose ``maxbatch``) run in a fresh process tree: a few timed steps
of forward, backward and optimizer step. A trial fails on memory if any rank reports OOM; a trial
that fails any other way stops the search for that device count with its status. Trials are
recorded in ``results.jsonl`` like sweep cells, so a killed search resumes without repeating one.
The answer is run once more to confirm it, and so is the smallest batch that ran out of memory
(an allocator's peak near the limit can vary from run to run).
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Dict, List, Optional

from scaling.cell import Cell, make_cell
from scaling.errors import ScalingError
from scaling.execute.run import run_and_record
from scaling.execute.store import ResultStore
from scaling.maxbatch.bracket import STRATEGIES, Bracket

MAXBATCH_FILE = "maxbatch.csv"


@dataclass
class MaxBatchResult:
    framework: str
    launcher: str
    workload: str
    devices: int
    max_batch: Optional[int]
    min_oom_batch: Optional[int]
    images_per_sec: Optional[float]
    peak_memory_bytes: Optional[int]
    trials: int
    seconds: float
    safe_batch: Optional[int] = None
    """``max_batch`` times the headroom, rounded down to the granularity."""
    status: str = "ok"
    """``ok``, or the status of the trial that stopped the search."""
    error: Optional[str] = None


class TrialRunner:
    """Runs trial cells, or returns the recorded result of a trial that already ran."""

    def __init__(self, out_dir, python: Optional[str] = None,
                 on_trial: Optional[Callable[[Dict], None]] = None):
        self.out_dir = out_dir
        self.python = python
        self.on_trial = on_trial
        self.recorded = ResultStore(out_dir).done()

    def __call__(self, cell: Cell) -> Dict:
        record = self.recorded.get(cell.cell_id)
        if record is None:
            record = run_and_record(cell, self.out_dir, python=self.python)
            self.recorded[cell.cell_id] = record
        if self.on_trial:
            self.on_trial(record)
        return record


def search_devices(make_trial: Callable[[int, int, int], Cell], devices: int, state: Bracket,
                   run_trial: TrialRunner, strategy: str = "model",
                   confirm: bool = True) -> MaxBatchResult:
    """Search one device count. ``make_trial(devices, batch, attempt)`` builds a trial cell."""
    propose = STRATEGIES[strategy]
    attempts: Dict[int, int] = {}
    records: List[Dict] = []

    def trial(batch: int) -> Dict:
        record = run_trial(make_trial(devices, batch, attempts.get(batch, 0)))
        attempts[batch] = attempts.get(batch, 0) + 1
        records.append(record)
        return record

    def result(record: Optional[Dict], status="ok", error=None) -> MaxBatchResult:
        cell = make_trial(devices, state.lo or state.min_batch, 0)
        return MaxBatchResult(
            framework=cell.framework, launcher=cell.launcher, workload=cell.workload,
            devices=devices, max_batch=state.lo if status == "ok" else None,
            min_oom_batch=state.hi if status == "ok" else None,
            images_per_sec=record and record["images_per_sec"],
            peak_memory_bytes=record and record["peak_memory_bytes"],
            trials=len(records), seconds=round(sum(r["wall_s"] for r in records), 1),
            status=status, error=error,
        )

    ooms = set()
    while True:
        batch = propose(state)
        while batch is not None:
            record = trial(batch)
            if record["status"] == "ok":
                state.fits(batch, record["capped_memory_peak_bytes"],
                           record["memory_capacity_bytes"])
            elif record["status"] == "oom":
                state.out_of_memory(batch)
                ooms.add(batch)
            else:
                return result(None, record["status"], record["error"])
            batch = propose(state)
        if confirm and state.hi is not None and attempts.get(state.hi, 0) == 1:
            # The smallest OOM is tried once more: near the limit an allocator's peak can vary
            # from run to run, and a sporadic OOM must not stand for the limit.
            again = trial(state.hi)
            if again["status"] == "ok":
                ooms.discard(state.hi)
                state.fits(state.hi, again["capped_memory_peak_bytes"],
                           again["memory_capacity_bytes"])
                state.hi = min((b for b in ooms if b > state.lo), default=None)
                continue
            if again["status"] != "oom":
                return result(None, again["status"], again["error"])
        if state.lo is None or not confirm:
            return result(records[-1] if state.lo is not None else None)
        check = trial(state.lo)
        if check["status"] == "ok":
            return result(check)
        if check["status"] != "oom":
            return result(None, check["status"], check["error"])
        state.usage.pop(state.lo, None)
        state.out_of_memory(state.lo)
        state.lo = max((b for b in state.usage if b < state.hi), default=None)


def find_max_batches(make_trial: Callable[[int, int, int], Cell], device_counts: List[int],
                     multiple_of: int, minimum: int, maximum: Optional[int],
                     run_trial: TrialRunner, strategy: str = "model",
                     headroom: Optional[float] = None,
                     confirm: bool = True) -> List[MaxBatchResult]:
    """Search each device count in increasing order.

    On GPUs the limit at N devices is at most the limit at fewer (communication buffers take
    memory), but on CPU workers the thread count per worker also changes with N, so an earlier
    answer is a starting point, never a bound: each count starts at the previous answer and
    borrows the previous memory slope until it has two points of its own, and its answer is
    always bracketed by its own trials.
    """
    results = []
    previous: Optional[Bracket] = None
    for devices in sorted(device_counts):
        state = Bracket(k=multiple_of, start=minimum, min_batch=minimum, max_batch=maximum)
        if previous is not None and strategy == "model":
            if previous.lo is not None:
                state.start = previous.lo
            state.slope_hint = previous.slope()
        found = search_devices(make_trial, devices, state, run_trial, strategy, confirm)
        if headroom is not None and found.max_batch is not None:
            found.safe_batch = state.floor(found.max_batch * headroom)
        results.append(found)
        previous = state
    return results


def write_maxbatch_csv(results: List[MaxBatchResult], out_dir) -> Path:
    path = Path(out_dir) / MAXBATCH_FILE
    existing = read_maxbatch_csv(out_dir) if path.exists() else []
    replaced = {(r.framework, r.launcher, r.workload, r.devices) for r in results}
    keep = [r for r in existing
            if (r["framework"], r["launcher"], r["workload"], int(r["devices"])) not in replaced]
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(MaxBatchResult)])
        writer.writeheader()
        writer.writerows(keep)
        for result in results:
            writer.writerow({k: "" if v is None else v for k, v in asdict(result).items()})
    return path


def read_maxbatch_csv(out_dir) -> List[Dict]:
    with open(Path(out_dir) / MAXBATCH_FILE, newline="") as table:
        return list(csv.DictReader(table))


def trial_factory(**fields) -> Callable[[int, int, int], Cell]:
    """``make_trial(devices, batch, attempt)`` for trials that share every other cell field."""
    def make_trial(devices: int, batch: int, attempt: int) -> Cell:
        return make_cell(devices=devices, batch_size=batch, repeat=attempt, purpose="maxbatch",
                         **fields)

    return make_trial


def check_search_bounds(multiple_of: int, minimum: Optional[int], maximum: Optional[int],
                        headroom: Optional[float], device_type: str,
                        memory_limit: Optional[int]) -> int:
    """Validate the search's bounds and return the starting batch."""
    if multiple_of <= 0:
        raise ScalingError(f"--multiple-of must be positive, got {multiple_of}")
    start = minimum if minimum is not None else multiple_of
    if start <= 0 or start % multiple_of:
        raise ScalingError(f"--min must be a positive multiple of {multiple_of}, got {start}")
    if maximum is not None and maximum < start:
        raise ScalingError(f"--max {maximum} is below --min {start}")
    if headroom is not None and not 0 < headroom <= 1:
        raise ScalingError(f"--headroom must be in (0, 1], got {headroom}")
    if device_type == "cpu" and memory_limit is None:
        raise ScalingError("on CPU devices the search needs --memory-limit: the cap stands in "
                           "for device memory")
    return start
