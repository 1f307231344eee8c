"""Compute facts a worker measures before its warm-up, outside the timed window: the FLOPs of one
image in the cell's mode, counted on the framework's own graph by torch's rules, and a probe of the
matrix-product speed of one device at the cell's threads (beside the other ranks' probes: a
sentinel of the machine's speed; on CPU, ``mfu`` divides by the node's ceiling measured alone,
``scaling.execute.ceiling``).

FLOPs count a multiply-add as two. ``forward`` counts the forward pass; ``forward_backward``
and ``train`` count forward and backward (convolutions and matrix products, which is where the
work is, as torch's ``FlopCounterMode`` counts them; an optimizer update is elementwise; each
framework's count is its worker package's ``flops`` module, ``scaling.workers.pytorch.flops``,
``scaling.workers.tensorflow.flops``, ``scaling.workers.jax.flops`` and
``scaling.workers.mxnet.flops``). Standard library at import; each function imports its
framework.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import importlib.util
import json
import os
import socket
import sys
import time
from typing import Dict, Optional

from scaling.atomic import write_json_atomically
from scaling.workers.common import USER_CACHE
from scaling.workers.matmul_worker import KERNELS

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""The matrix dtype of each precision."""
CEILING_N = {"cpu": 1024, "gpu": 8192}
"""Side of the matrices of the ceiling's product on each device type."""
CEILING_SLOW_S = 1.0
"""A kernel whose first product at ``CEILING_N`` takes longer than this (float16 emulated on a
CPU: under a GFLOP/s) is timed on smaller matrices, a product of about ``CEILING_MIN_S``, so
that its ceiling takes seconds rather than minutes."""
_SIDES: Dict[tuple, int] = {}
"""The side this process settled on for each (framework, device type, dtype)."""
FLOPS_CACHE = os.path.join(USER_CACHE, "flops.json")
"""Where the FLOP counts are kept, per user, as pip keeps its wheels: a count depends on the
framework and its version, the workload's definition, the size and the mode, never on the
machine or the run (:func:`counting_sources`)."""
CEILING_REPEATS = 3
CEILING_MIN_S = 0.25
"""The ceiling's products go on for at least this long: on a CPU the first few products run
slower than later ones (the clock and the caches warm up), and a ceiling taken from them
would put a cell's fraction of it above 1."""


def matmul_ceiling_tflops(framework: str, device_type: str, dtype: str) -> Optional[float]:
    """The best of the products of two square matrices on one device over at least
    ``CEILING_MIN_S`` (and ``CEILING_REPEATS`` products), in TFLOP/s, with the threads the
    process already has; None where the framework has no matrix kernel."""
    if framework not in KERNELS:
        return None
    make, product_sum, _, _, _ = KERNELS[framework](device_type, dtype)
    n = _SIDES.get((framework, device_type, dtype), CEILING_N[device_type])
    matrix = make(n)
    started = time.perf_counter()
    product_sum(matrix)
    first = time.perf_counter() - started
    if first > CEILING_SLOW_S:
        n = max(128, int(n * (CEILING_MIN_S / first) ** (1 / 3)) // 64 * 64)
        matrix = make(n)
        product_sum(matrix)
    _SIDES[(framework, device_type, dtype)] = n
    times = []
    while len(times) < CEILING_REPEATS or sum(times) < CEILING_MIN_S:
        started = time.perf_counter()
        product_sum(matrix)
        times.append(time.perf_counter() - started)
    return 2 * n**3 / min(times) / 1e12


def compute_report(cell: Dict, precision: str, flops_per_image, gradient_bytes: Optional[int],
                   devices_sharing: int = 1) -> Dict:
    """The rank report's compute facts: ``flops_per_image`` is a function, called once (None
    where the framework has no counter of its own), and ``devices_sharing`` the devices whose
    threads the probe's pool holds (its figure is divided among them). Max-batch trials take
    them too: what a cell allocates for them counts against its memory.

    The probe does not change between the cells of a run that share their framework and its
    version, host, device, threads and dtype, so it is kept in the run's
    ``cell["compute_cache"]`` file and measured once a run (:func:`cached`); a later run probes
    afresh, as the machine's speed may have moved. The count does not change at all for one
    framework version, workload definition, size and mode, so it is kept per user
    (:data:`FLOPS_CACHE`) and counted once."""
    framework, dtype = cell["framework"], DTYPES[precision]
    module = sys.modules.get(framework)
    version = str(getattr(module, "__version__", ""))
    probe = cached(cell.get("compute_cache"),
                   ["probe", framework, version, socket.gethostname(), cell["device_type"],
                    cell["threads_per_device"], dtype],
                   lambda: matmul_ceiling_tflops(framework, cell["device_type"], dtype))
    flops = cached(FLOPS_CACHE, ["flops", framework, version, counting_sources(),
                                 cell["workload"], cell["image_size"], cell["mode"]],
                   flops_per_image) if flops_per_image else None
    return {"flops_per_image": flops,
            "gradient_bytes": None if cell["mode"] == "forward" else gradient_bytes,
            "precision": precision,
            "matmul_probe_tflops": probe / devices_sharing if probe else None}


@functools.lru_cache(maxsize=None)
def counting_sources() -> str:
    """A digest of what a FLOP count rests on besides the framework: the workloads' definitions
    (``workloads``) and the workers' code that builds, steps and counts them
    (``scaling/workers``), so that an edit to any of it counts again. Read once a process:
    the cells of a shared tree run the code it started with."""
    digest = hashlib.sha256()
    roots = [os.path.dirname(importlib.util.find_spec("workloads").origin),
             os.path.dirname(__file__)]
    for path in sorted(path for root in roots
                       for path in glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
        with open(path, "rb") as source:
            digest.update(source.read())
    return digest.hexdigest()[:16]


def cached(path: Optional[str], key: list, measure):
    """``measure()``'s value under ``key`` in the JSON file at ``path``, measured and added
    there where it is missing (every time where ``path`` is None). Two ranks that measure the
    same key at once both write it: the file stays whole (an atomic write), and either value
    serves. A file that cannot be written (a read-only home) keeps nothing, and the value is
    measured again next time."""
    if not path:
        return measure()
    name = json.dumps(key)
    try:
        with open(path) as handle:
            entries = json.load(handle)
    except (OSError, ValueError):
        entries = {}
    if name not in entries:
        entries[name] = measure()
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_json_atomically(path, entries)
    return entries[name]
