"""The allreduce benchmark of one process: a float32 sum over the cell's devices through the
launcher's own collective, timed at each size.

A framework supplies a *collective* built for one process of a cell (``purpose`` ``allreduce``):

- ``devices``: the devices the sum runs over, in the whole cell (``n`` of the bus bandwidth);
- ``prepare(count)``: make this process's buffers of ``count`` float32 elements, all ones;
- ``allreduce()``: sum the buffers over every device, in place;
- ``first_value()``: the first element of this process's first buffer, on the host;
- ``zero()``: set the buffers to zero;
- ``synchronize()``: wait for the queued work; ``barrier()``: wait for every process;
- ``finish()``: leave the collective, returning what the process reports.

Each size is checked first: one allreduce of ones must give ``devices`` in every replica, so a
collective that sums over the wrong devices is caught. Then the buffers are zeroed (so that the
values never grow), a chunk of untimed iterations warms up, and :data:`CHUNKS` chunks are timed
between a barrier and a synchronization each. Standard library only.
"""

from __future__ import annotations

import time
from typing import Dict, List

CHUNKS = 10
"""Timed chunks per size: enough for a 95% interval of the median from order statistics."""
CHUNK_BYTES = 4 * 2**20
"""About this many bytes reduced per chunk: small sizes repeat within a chunk, so a chunk is
not dominated by the clock and the barrier."""
MAX_PER_CHUNK = 50


def iterations_per_chunk(nbytes: int) -> int:
    """Allreduces per timed chunk at ``nbytes``: the same on every rank."""
    return max(1, min(MAX_PER_CHUNK, CHUNK_BYTES // nbytes))


def time_size(collective, nbytes: int) -> Dict:
    """Check, warm up and time the allreduce of ``nbytes`` (a multiple of 4)."""
    collective.prepare(nbytes // 4)
    collective.allreduce()
    got = collective.first_value()
    if got != collective.devices:
        raise ArithmeticError(f"allreduce of ones over {collective.devices} devices gave {got} "
                              f"at {nbytes} bytes")
    collective.zero()
    per_chunk = iterations_per_chunk(nbytes)
    for _ in range(per_chunk):
        collective.allreduce()
    collective.synchronize()
    seconds = []
    for _ in range(CHUNKS):
        collective.barrier()
        started = time.perf_counter()
        for _ in range(per_chunk):
            collective.allreduce()
        collective.synchronize()
        seconds.append(time.perf_counter() - started)
    return {"bytes": nbytes, "iterations_per_chunk": per_chunk, "chunk_seconds": seconds}


def time_sizes(collective, sizes: List[int]) -> Dict:
    """Every size in increasing order; the report's window spans them all."""
    collective.barrier()
    start_wall, start = time.time(), time.perf_counter()
    timed = [time_size(collective, nbytes) for nbytes in sorted(sizes)]
    window = time.perf_counter() - start
    return {"start": start_wall, "end": start_wall + window, "window_s": window,
            "allreduce": timed, "allreduce_devices": collective.devices}


def gradient_allreduce(session, cell: Dict) -> Dict:
    """After the window of a data-parallel cell over more than one device with a backward pass:
    the allreduce of one replica's gradient bytes through the session's own collective, timed
    as :func:`time_size` times a size (the scaling model's communication term)."""
    if cell["mode"] == "forward" or cell["data_parallel"] == "none" or \
            cell["devices"] * cell["nodes"] < 2 or not hasattr(session, "collective"):
        return {}
    collective = session.collective()
    return {"gradient_allreduce": {**time_size(collective, session.gradient_bytes // 4 * 4),
                                   "devices": collective.devices}}
