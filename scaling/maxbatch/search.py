"""Find the largest per-device batch that fits, at each device count, under the real launcher.

Every trial is a real cell (purpose ``maxbatch``) run in a fresh process tree: a few timed steps
of forward, backward and optimizer step, and all that a cell does besides (its compute facts,
and after the window the gradients' allreduce and the contended compute), whose memory counts
as much as the steps'. A trial fails on memory if any rank reports OOM (on the
evidence its report gives, ``oom_evidence``); a trial that fails any other way runs once more,
and failing again stops the search for that device count with its status and batch. Trials are
recorded in ``results.jsonl`` like sweep cells, so a killed search resumes without repeating one.
The smallest batch that ran out of memory is run once more (an allocator's peak near the limit
can vary from run to run). The answer is then confirmed by runs of purpose ``confirmation``,
each in its own process tree and run as the plain cell at that batch (its steps and warm-up),
until it is reliable (:func:`confirmation_verdict`). A batch that fails
any of its confirmations is not the answer: the bracket closes below it, and the next candidate
is confirmed in turn.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set

from scaling.cell import Cell, make_cell
from scaling.errors import ScalingError
from scaling.execute.run import run_and_record
from scaling.execute.store import ResultStore
from scaling.maxbatch.bracket import STRATEGIES, Bracket

MAXBATCH_FILE = "maxbatch.csv"

PLAIN_CELL = {"steps": 20, "warmup": 5}
"""The steps and warm-up of a plain ``scaling run`` cell (its defaults), which a confirmation
runs."""

MIN_CONFIRMATIONS = 2
"""Confirmations an answer passes at least."""
MAX_CONFIRMATIONS = 4
"""Confirmations after which an answer whose peaks are still unsettled is not the answer."""


@dataclass
class MaxBatchResult:
    """One row of ``maxbatch.csv``; its fields are :data:`scaling.schema.MAXBATCH_FIELDS`."""

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
    status: str = "ok"
    error: Optional[str] = None
    failed_batch: Optional[int] = None
    confirmations: int = 0
    rejected: Optional[str] = None


def run_kind(record: Dict) -> str:
    """``trial`` or ``confirmation``: what a run of the search was, in words."""
    return "confirmation" if record.get("purpose") == "confirmation" else "trial"


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


class _GaveUp(Exception):
    """A batch failed other than by OOM on its run and on its retry."""

    def __init__(self, batch: int):
        super().__init__(batch)
        self.batch = batch


def confirmation_verdict(peaks: List[Optional[int]], capacity: Optional[int]) -> Optional[bool]:
    """Whether passed confirmations whose capped peaks are ``peaks`` make the answer reliable
    (True), show that it is not (False), or leave it open (None: run another).

    At least :data:`MIN_CONFIRMATIONS`. Their spread (highest peak less lowest) is how much one
    run varies from another: the room that the highest leaves under ``capacity`` must exceed
    it. A room under twice the spread is doubtful, and further runs test it, up to
    :data:`MAX_CONFIRMATIONS`. Without a capacity or a peak, the minimum count decides.
    """
    if len(peaks) < MIN_CONFIRMATIONS:
        return None
    if capacity is None or None in peaks:
        return True
    spread, room = max(peaks) - min(peaks), capacity - max(peaks)
    if room <= spread:
        return False
    return True if room > 2 * spread or len(peaks) >= MAX_CONFIRMATIONS else None


class DeviceSearch:
    """The trials of one device count: the bracket, and what each batch did on each run.

    ``make_trial(devices, batch, attempt, confirmation=False)`` builds a trial cell, or with
    ``confirmation`` the cell of a confirmation run; each run of a batch is its own cell
    (``repeat`` is the attempt), so a resumed search replays them one by one.
    """

    def __init__(self, make_trial: Callable[..., Cell], devices: int,
                 state: Bracket, run_trial: TrialRunner, strategy: str = "model",
                 confirm: bool = True):
        self.make_trial, self.devices, self.state = make_trial, devices, state
        self.run_trial, self.propose, self.confirm = run_trial, STRATEGIES[strategy], confirm
        self.records: List[Dict] = []
        self.runs: Dict[int, List[Dict]] = {}
        """Batch -> its trial records, in the order they ran."""
        self.ooms: Set[int] = set()
        self.rejected: Dict[int, Dict] = {}
        """Batch -> the confirmation it failed."""

    def run(self) -> MaxBatchResult:
        try:
            return self._search()
        except _GaveUp as stop:
            first, last = self.runs[stop.batch][-2:]
            how = (f"{last['status']} twice" if first["status"] == last["status"]
                   else f"{first['status']}, then {last['status']}")
            return self._result(None, last["status"], failed_batch=stop.batch,
                                error=f"batch {stop.batch} ended {how}: {last['error']}")

    def _search(self) -> MaxBatchResult:
        """Bracket, then confirm: the smallest OOM (a fit there reopens the bracket), then the
        answer (a failed confirmation closes the bracket below it, and the next largest fit
        becomes the answer)."""
        state = self.state
        while True:
            self._bracket()
            if not self.confirm:
                return self._result(self._last_fit(state.lo))
            if self._smallest_oom_fits():
                continue
            if state.lo is None:
                return self._no_answer()
            passed = self._confirm(state.lo)
            if passed:
                return self._result(passed[-1], confirmations=len(passed))
            state.usage.pop(state.lo, None)
            state.hi = state.lo
            state.lo = max((b for b in state.usage if b < state.hi), default=None)

    def _bracket(self) -> None:
        """Run the strategy's trials until it has no batch left to propose."""
        batch = self.propose(self.state)
        while batch is not None:
            record = self._trial(batch)
            if record["status"] == "ok":
                self._fits(batch, record)
            else:
                self._ran_out(batch)
            batch = self.propose(self.state)

    def _smallest_oom_fits(self) -> bool:
        """Run the smallest OOM once more if it ran out of memory on its only run: near the
        limit an allocator's peak can vary from run to run (TensorFlow's BFC allocator under
        its cap does), and a sporadic OOM must not stand for the limit. True when it fitted:
        it is no bound, and the next smallest bound takes its place."""
        state = self.state
        if state.hi is None or state.hi in self.rejected or self._outcomes(state.hi) != ["oom"]:
            return False
        again = self._trial(state.hi)
        if again["status"] != "ok":
            return False
        self.ooms.discard(state.hi)
        self._fits(state.hi, again)
        state.hi = min((b for b in self.ooms | set(self.rejected) if b > state.lo), default=None)
        return True

    def _confirm(self, batch: int) -> List[Dict]:
        """Run ``batch`` as a plain cell until :func:`confirmation_verdict` decides: the passed
        runs, or an empty list when one failed (an OOM among them is an OOM of the search) or
        their peaks left no room for their spread (``unsettled``)."""
        passed: List[Dict] = []
        verdict = None
        while verdict is None:
            record = self.run_trial(self.make_trial(self.devices, batch, len(passed),
                                                    confirmation=True))
            self.records.append(record)
            if record["status"] != "ok":
                if record["status"] == "oom":
                    self.ooms.add(batch)
                self.rejected[batch] = record
                return []
            passed.append(record)
            verdict = confirmation_verdict([r["capped_memory_peak_bytes"] for r in passed],
                                           record["memory_capacity_bytes"])
        if not verdict:
            self.rejected[batch] = {**record, "status": "unsettled"}
            return []
        return passed

    def _no_answer(self) -> MaxBatchResult:
        """No batch fits, on the trials or on the confirmations: a search whose every
        candidate failed its confirmation other than by OOM ends with the last one's status."""
        failures = [self.rejected[b] for b in sorted(self.rejected)]
        if not failures or failures[0]["status"] in ("oom", "unsettled"):
            return self._result(None)
        first = failures[0]
        return self._result(None, first["status"], failed_batch=first["batch_size"],
                            error=f"batch {first['batch_size']} failed its confirmation: "
                                  f"{first['error']}")

    def _trial(self, batch: int) -> Dict:
        """Run ``batch`` (once more when it fails other than by OOM): its record, ``ok`` or
        ``oom``; :class:`_GaveUp` when the retry fails too."""
        for _ in range(2):
            runs = self.runs.setdefault(batch, [])
            record = self.run_trial(self.make_trial(self.devices, batch, len(runs)))
            runs.append(record)
            self.records.append(record)
            if record["status"] in ("ok", "oom"):
                return record
        raise _GaveUp(batch)

    def _fits(self, batch: int, record: Dict) -> None:
        self.state.fits(batch, record["capped_memory_peak_bytes"],
                        record["memory_capacity_bytes"])

    def _ran_out(self, batch: int) -> None:
        self.state.out_of_memory(batch)
        self.ooms.add(batch)

    def _outcomes(self, batch: int) -> List[str]:
        """The statuses of ``batch``'s runs that decided something: ``ok`` or ``oom``."""
        return [r["status"] for r in self.runs[batch] if r["status"] in ("ok", "oom")]

    def _last_fit(self, batch: Optional[int]) -> Optional[Dict]:
        """The last record of ``batch`` that ended ``ok``, or None."""
        fits = [r for r in self.runs.get(batch, []) if r["status"] == "ok"]
        return fits[-1] if fits else None

    def _result(self, record: Optional[Dict], status: str = "ok", error: Optional[str] = None,
                failed_batch: Optional[int] = None, confirmations: int = 0) -> MaxBatchResult:
        state = self.state
        cell = self.make_trial(self.devices, state.lo or state.min_batch, 0)
        answer = state.lo if status == "ok" else None
        smallest_oom = min((b for b in self.ooms if answer is None or b > answer), default=None)
        return MaxBatchResult(
            framework=cell.framework, launcher=cell.launcher, workload=cell.workload,
            devices=self.devices, max_batch=answer,
            min_oom_batch=smallest_oom if status == "ok" else None,
            images_per_sec=record and record["images_per_sec"],
            peak_memory_bytes=record and record["peak_memory_bytes"],
            trials=len(self.records), seconds=round(sum(r["wall_s"] for r in self.records), 1),
            status=status, error=error, failed_batch=failed_batch, confirmations=confirmations,
            rejected=", ".join(f"{b} {r['status']}" for b, r in sorted(self.rejected.items()))
            or None,
        )


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
        found = DeviceSearch(make_trial, devices, state, run_trial, strategy, confirm).run()
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


def trial_factory(plain: Optional[Dict] = None, **fields) -> Callable[..., Cell]:
    """``make_trial(devices, batch, attempt, confirmation=False)`` for trials that share every
    other cell field. A confirmation takes ``plain``'s fields in place of the trial's: the
    steps, warm-up and ``min_time_s`` of the plain cell that the answer stands for
    (:data:`PLAIN_CELL` by default), and its timeout, or the trial's for as many steps."""
    plain = PLAIN_CELL if plain is None else plain
    plain_fields = {**fields, **plain}
    if "timeout_s" in fields and "timeout_s" not in plain:
        steps = [(run.get("steps", PLAIN_CELL["steps"]), run.get("warmup", PLAIN_CELL["warmup"]))
                 for run in (plain_fields, fields)]
        ratio = sum(steps[0]) / max(1, sum(steps[1]))
        plain_fields["timeout_s"] = fields["timeout_s"] * max(1.0, ratio)

    def make_trial(devices: int, batch: int, attempt: int, confirmation: bool = False) -> Cell:
        return make_cell(devices=devices, batch_size=batch, repeat=attempt,
                         purpose="confirmation" if confirmation else "maxbatch",
                         **(plain_fields if confirmation else fields))

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
