"""The one timed loop, and the entry point every worker runs it through.

A framework supplies a *session* built for one process of a cell:

- ``images_per_step``: images this process trains per step, over all of its devices;
- ``step()``: one training step;
- ``synchronize()``: wait for the device to finish the work queued so far;
- ``barrier()``: wait for every process of the cell;
- ``agree_max(value)``: the largest of the integer ``value`` over the processes of the cell (a
  collective; every process calls it at the same point), before the window only;
- ``step_timer()``, optional: an object with ``mark()`` and ``step_times()``, for frameworks
  with device events (chunk means otherwise);
- ``profile(steps, path)``, optional: run ``steps`` steps under the framework's profiler, write
  its Chrome trace to ``path`` and return whether compute ran on a device (GPU), or None where
  this rank only stepped along unprofiled;
- ``exposed_communication()``, optional: the share of the profiled steps spent waiting for
  communication that the trace cannot see (torch DDP's gloo allreduce on CPU), or None;
- ``collective()`` and ``gradient_bytes``, optional: the allreduce of the mechanism that
  aggregates the gradients (``scaling.workers.collective``), and one replica's gradient bytes,
  for the allreduce timed after the window at that size;
- ``local_steps(count)``, optional: ``count`` forward and backward passes on every replica
  the process drives, with nothing aggregated and no update, waiting for them to finish (the
  scaling model's compute at the cell's device count, :func:`contended_compute`);
- for a cell on real data (``cell["data"]``, ``scaling.workers.input_data``): ``step()``
  takes the next batch of the framework's input pipeline, ``loader_alone()`` returns a fresh
  pipeline of the same workers and shard as an endless iterator of each batch's image count,
  with no model and no copy to the device, and ``use_synthetic()`` makes later steps run on
  one synthetic batch (:func:`input_references`);
- ``finish()``: a dict of what the process reports after its window (memory, parameters),
  with fingerprints, one per replica that the process drives: ``data_sums``, the sum of the
  replica's input images (each replica's batch is seeded by its index in the cell), and, in
  ``forward_backward`` (in ``train`` where the optimizer leaves them), ``gradient_sums``, the
  sum of every element of its gradients after the last step (equal on every replica).

Everything else is here, written once: warm-up, the window between two barriers, step times,
fault injection and the rank report (``scaling.workers.common`` watches for a rank killed by a
signal, ``scaling.workers.tree`` runs several cells in one process). Standard library only, so
that it runs under every framework's interpreter.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import threading
import time
from typing import Callable, Dict, Optional, Tuple

from scaling.workers import collective_env, common, input_data, tree
from scaling.workers.breakdown import (PROFILE_STEPS, breakdown_of_trace,
                                       with_exposed_communication)
from scaling.workers.collective import gradient_allreduce, time_sizes
from scaling.workers.window_plan import (CALIBRATION_SKIP, MAX_WINDOWS,
                                         calibration_steps_more, chunk_length, planned_steps,
                                         warmup_steps)


SESSION_COLLECTIVES = ("barrier", "agree_max")
"""The session's methods that communicate across ranks, counted inside the window."""


def warm_up(session, cell: Dict, faults: common.FaultInjector) -> Tuple[Optional[float], int]:
    """The :func:`warmup_steps`, and under ``min_time_s`` as many more as any rank needs
    (:func:`calibration_steps_more`, agreed in one collective outside the timed steps): the
    mean time of those after the first :data:`CALIBRATION_SKIP` (None without ``min_time_s``),
    and the steps run. The device is synchronized at the edges of the timed steps only."""
    count, calibrate, started = warmup_steps(cell), cell.get("min_time_s", 0.0) > 0, None
    for index in range(count):
        if index == CALIBRATION_SKIP and calibrate:
            session.synchronize()
            started = time.perf_counter()
        _step(session, faults, index)
    session.synchronize()
    if started is None:
        return None, count
    timed, seconds = count - CALIBRATION_SKIP, time.perf_counter() - started
    more = session.agree_max(calibration_steps_more(cell, seconds, timed))
    resumed = time.perf_counter()
    for index in range(count, count + more):
        _step(session, faults, index)
    session.synchronize()
    seconds += time.perf_counter() - resumed
    return seconds / (timed + more), count + more


def _step(session, faults: common.FaultInjector, index: int) -> None:
    faults.at_step(index)
    common.clear_errno()
    session.step()


@contextlib.contextmanager
def collectives_counted(session):
    """While the block runs, count the calls of the session's :data:`SESSION_COLLECTIVES`
    (``counted["calls"]``), through wrappers that shadow its methods and go on leaving."""
    counted = {"calls": 0}

    def counting(method):
        def call(*args, **kwargs):
            counted["calls"] += 1
            return method(*args, **kwargs)
        return call

    names = [name for name in SESSION_COLLECTIVES if hasattr(session, name)]
    for name in names:
        setattr(session, name, counting(getattr(session, name)))
    try:
        yield counted
    finally:
        for name in names:
            delattr(session, name)


def timed_window(session, cell: Dict, faults: common.FaultInjector) -> Dict:
    """Warm up, then time a number of steps decided before the window, between two barriers on
    this rank's own clock (:func:`one_window`).

    The window times the asked ``cell["steps"]``; under ``min_time_s``, enough whole chunks more
    to last that long at the warm-up's step time (:func:`warm_up`, :func:`planned_steps`), the
    largest count of any rank, agreed once (``session.agree_max``) before the start barrier, so
    all ranks time the same steps. Where a window's steps (the sum of its chunks, without the
    barriers' wait) fell short of ``min_time_s`` on any rank (agreed after its end barrier), it
    is timed again, up to :data:`MAX_WINDOWS` in all, planned on its own pace; ``windows`` says
    how many were timed, and the last one counts.
    """
    (step_s, first), min_time_s = warm_up(session, cell, faults), cell.get("min_time_s", 0.0)
    for windows in range(1, MAX_WINDOWS + 1):
        own = planned_steps(cell, step_s)
        planned = session.agree_max(own) if min_time_s > 0 else own
        window = one_window(session, cell, faults, planned, first)
        window.update(calibration_step_s=step_s, steps_planned=own, windows=windows)
        stepped_s = sum(chunk["seconds"] for chunk in window["chunks"])
        if windows == MAX_WINDOWS or not min_time_s or \
                not session.agree_max(int(stepped_s < min_time_s)):
            return window
        first += planned
        step_s = stepped_s / planned


def one_window(session, cell: Dict, faults: common.FaultInjector, planned: int,
               first: int) -> Dict:
    """Time ``planned`` steps, the first of them the cell's step number ``first``, between two
    barriers. The window holds training steps only: the device is synchronized at chunk
    boundaries, every :func:`chunk_length` steps, never inside a chunk, and no collective of
    the session runs in it (``window_collectives`` counts them). The window starts when every
    rank has left the start barrier and ends when every rank has reached the end barrier, so
    each rank's window covers all ranks' timed work. Clocks of different hosts are never
    compared. Step times come from the session's device events where it has them
    (``step_timer``), and from the chunk means otherwise."""
    session.barrier()
    timer = session.step_timer() if hasattr(session, "step_timer") else None
    length, chunks, steps = chunk_length(cell["steps"]), [], 0
    with collectives_counted(session) as collectives:
        start_wall = time.time()
        start = chunk_start = time.perf_counter()
        if timer:
            timer.mark()
        while steps < planned:
            count = min(length, planned - steps)
            for _ in range(count):
                _step(session, faults, first + steps)
                steps += 1
                if timer:
                    timer.mark()
            session.synchronize()
            chunk_end = time.perf_counter()
            chunks.append({"steps": count, "seconds": chunk_end - chunk_start})
            chunk_start = chunk_end
    session.barrier()
    window = time.perf_counter() - start
    times = common.step_time_summary(
        timer.step_times() if timer else [c["seconds"] / c["steps"] for c in chunks])
    return {
        "start": start_wall, "end": start_wall + window, "window_s": window,
        "steps_timed": steps, "window_collectives": collectives["calls"],
        "images": session.images_per_step * steps, "chunks": chunks,
        "step_time_median_s": times["median"], "step_time_p95_s": times["p95"],
    }


def input_references(session, cell: Dict, faults: common.FaultInjector) -> Dict:
    """After the window of a cell on real data: the two figures its verdict needs.

    - ``loader_window``: the input pipeline alone, a fresh one with the same workers and shard,
      pulling ``steps`` batches (at least :func:`scaling.workers.window_plan.ready_floor`)
      after ``warmup`` (which start its workers) with no model, on every rank at once between
      two barriers;
    - ``synthetic_window``: the same model, threads and steps on one synthetic batch, timed as
      the cell's own window.
    """
    loader = session.loader_alone()
    for _ in range(cell["warmup"]):
        next(loader)
    session.barrier()
    start, images = time.perf_counter(), 0
    for _ in range(planned_steps(cell, None)):
        images += next(loader)
    session.barrier()
    loader_window = {"window_s": time.perf_counter() - start, "images": images}
    del loader  # its workers stop, rather than prefetch during the synthetic window
    session.use_synthetic()
    synthetic = timed_window(session, cell, faults)
    return {"loader_window": loader_window,
            "synthetic_window": {"window_s": synthetic["window_s"],
                                 "images": synthetic["images"]}}


def timed_local_chunks(session, steps: int, beside=None) -> list:
    """The mean seconds of one local step in each chunk of :func:`chunk_length` steps, on every
    rank at once between two barriers, until their mean is known to
    :data:`REFERENCE_PRECISION` (:func:`precise_enough`) on every rank, after at least
    :data:`REFERENCE_MIN_CHUNKS` chunks, or the ``steps`` have run. The ranks agree after each
    chunk whether to go on (a collective between chunks, never inside one). ``beside``: a
    function run in a second thread through each step (joined after it, outside the step's
    time)."""
    session.barrier()
    length, means, done = chunk_length(steps), [], 0
    while done < steps:
        count = min(length, steps - done)
        means.append(_local_seconds(session, count, beside) / count)
        done += count
        if len(means) >= REFERENCE_MIN_CHUNKS and done < steps and \
                not session.agree_max(int(not precise_enough(means))):
            break
    session.barrier()
    return means


REFERENCE_PRECISION = 0.03
"""A reference's chunks stop once the 95% interval of their mean is within this fraction of
it: the scaling model sets each local step against another of about the same size."""
REFERENCE_MIN_CHUNKS = 4
"""Chunks a reference times at least, so that its interval rests on some spread."""
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179)
"""Student's t at 97.5% for 1, 2, ... 12 degrees of freedom, the last one also beyond (a little
wider than the truth there): the worker's standard-library copy of ``scaling.uncertainty``'s
interval."""


def precise_enough(means: list) -> bool:
    """Whether the 95% t interval of the mean of ``means`` is within
    :data:`REFERENCE_PRECISION` of it."""
    mean = statistics.fmean(means)
    t = T_975[min(len(means), len(T_975) + 1) - 2]
    half = t * statistics.stdev(means) / len(means) ** 0.5
    return half <= REFERENCE_PRECISION * mean


def _local_seconds(session, count: int, beside) -> float:
    """Seconds of ``count`` local steps, each with ``beside`` running in a second thread."""
    if beside is None:
        started = time.perf_counter()
        session.local_steps(count)
        return time.perf_counter() - started
    seconds = 0.0
    for _ in range(count):
        thread = threading.Thread(target=beside)
        started = time.perf_counter()
        thread.start()
        session.local_steps(1)
        seconds += time.perf_counter() - started
        thread.join()
    return seconds


def contended_compute(session, cell: Dict, marks: Dict[str, float]) -> Dict:
    """After the window of a cell with a backward pass (a max-batch trial's too, so that what
    it allocates counts): ``steps`` forward and backward passes with nothing aggregated, on
    every rank at once, timed in chunks (their means give ``local_step_s`` an interval). Their
    mean on this rank is the compute of one step at the cell's device count, contention for
    the host's cores and memory included, which the scaling model sets against the ``single``
    cell's. A launcher's own one-device point has no contention to time, and skips it.

    In a data-parallel cell over two or more devices with a collective, the same steps again,
    each with an allreduce of one replica's gradient bytes through the cell's own collective
    in flight beside it, in a second thread (``communicating_step_chunks``): the compute with
    the launcher's communication running beside it, as during a training step's backward pass
    (its CPU work, and its background threads)."""
    alone = cell["devices"] * cell["nodes"] == 1 and cell["data_parallel"] != "none"
    if cell["mode"] == "forward" or alone or not hasattr(session, "local_steps"):
        return {}
    session.local_steps(1)
    report = {"local_step_chunks": timed_local_chunks(session, cell["steps"])}
    marks["local_steps"] = time.time()
    if cell["data_parallel"] != "none" and hasattr(session, "collective"):
        collective = session.collective()
        collective.prepare(session.gradient_bytes // 4)
        collective.zero()

        def allreduce():
            """One allreduce of the gradient bytes, until its result is there."""
            collective.allreduce()
            collective.synchronize()
        allreduce()  # its first call sets the collective up
        report["communicating_step_chunks"] = timed_local_chunks(session, cell["steps"],
                                                                 allreduce)
        marks["communicating_steps"] = time.time()
    return {**report, "local_step_s": statistics.fmean(report["local_step_chunks"])}


def profiled_steps(session, cell_dir: str, rank: int) -> Dict:
    """After the window: ``PROFILE_STEPS`` steps under the profiler, and where their time went."""
    if not hasattr(session, "profile"):
        return {"step_breakdown": None,
                "profile_error": "this framework's worker has no profiler hook"}
    path = os.path.join(cell_dir, f"trace-rank{rank}.json")
    on_device = session.profile(PROFILE_STEPS, path)
    if on_device is None:
        return {"step_breakdown": None, "profile_error": "this rank stepped along unprofiled"}
    breakdown = breakdown_of_trace(path, on_device)
    exposed = session.exposed_communication() if hasattr(session, "exposed_communication") \
        else None
    if breakdown and exposed is not None:
        breakdown = with_exposed_communication(breakdown, exposed)
    return {"step_breakdown": breakdown, "trace": path}


def run_worker(build: Callable[[Dict, Dict, int], object], cap_heap: bool = True,
               collective: Optional[Callable[[Dict, Dict, int], object]] = None,
               preload: Optional[Callable[[], None]] = None) -> None:
    """``python -m WORKER FOLDER``: run the cell of a cell folder, or each cell that the
    harness sends a shared tree's folder, in turn (``scaling.workers.tree``), then exit.

    ``build(cell, report, rank)`` returns the session, and ``collective(cell, report, rank)``
    the collective; either may add details to ``report``. ``cap_heap``: apply the cell's CPU
    memory cap as RLIMIT_DATA (frameworks that cap their own allocator pass False).
    ``preload()`` imports the framework, in a tree started ahead of its first cell.
    """
    process_started = entered = time.time()
    folder = sys.argv[1]
    rank = common.process_ranks()[0]
    common.die_with_parent()
    if not tree.is_tree(folder):
        common.watch_for_signals(lambda: folder, rank)
        run_cell(build, collective, folder, rank, entered, cap_heap, process_started)
        leave()
    common.watch_for_signals(lambda: tree.current_cell(folder, rank), rank)
    if tree.preloads(folder):
        if preload is not None:
            preload()
        entered = None
    for cell_dir, began in tree.cells(folder, rank, entered):
        run_cell(build, collective, cell_dir, rank, began, cap_heap and began == entered,
                 process_started)
    leave()


def run_cell(build, collective, cell_dir: str, rank: int, entered: float,
             cap_heap: bool, process_started: float) -> None:
    """One cell in this process: build the session and run the timed loop, or for a cell of
    purpose ``allreduce``, build its collective and time it at the cell's sizes; then write the
    rank's report, which says when the process started (``process_started``, before the cell
    where it runs in a shared tree). A failure writes it and ends the process
    (``common.reporting``). A ``tune`` trial times no references (``cell["references"]``): each
    second of it comes out of the tune's budget."""
    cell = common.load_cell(cell_dir)
    if cap_heap:
        common.apply_memory_limit(cell["memory_limit"])
    with common.reporting(cell_dir, rank) as report:
        report["host"] = socket.gethostname()
        report["process_started"] = process_started
        report["collective_env"] = collective_env.capture(os.environ)
        if cell["purpose"] == "allreduce":
            measured = collective(cell, report, rank)
            report.update(time_sizes(measured, cell["sizes"]))
            report.update(measured.finish())
            return
        if cell.get("data"):
            input_data.check_data_dir(cell["data"])
        session = build(cell, report, rank)
        faults = common.FaultInjector(rank, cell["batch_size"])
        marks = report["marks"] = {"entered": entered, "first_step": time.time()}
        report.update(timed_window(session, cell, faults))
        if cell.get("data") and cell["references"]:
            report.update(input_references(session, cell, faults))
            marks["input"] = time.time()
        if cell.get("profile"):
            report.update(profiled_steps(session, cell_dir, rank))
            marks["profile"] = time.time()
        if cell["references"]:
            allreduce = gradient_allreduce(session, cell)
            if allreduce:
                report.update(allreduce)
                marks["allreduce"] = time.time()
            report.update(contended_compute(session, cell, marks))
        common.stop_horovod_timeline()
        report.update(session.finish())


def leave() -> None:
    """After this rank's last report: exit at once. ``session.finish()`` took the framework's
    collectives down in order (in a shared tree, every rank leaves as the harness closes it),
    so the interpreter's own teardown (a second or more for torch and TensorFlow) would only
    free what the process is about to lose anyway."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
