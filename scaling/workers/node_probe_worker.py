"""One device's matmul ceiling and memory bandwidth, in a process of its own:
``python -m scaling.workers.node_probe_worker SPEC OUT``.

The spec names the device (``cpu``, or ``gpu`` and its index), the threads a CPU device has
and the repeats. Each repeat makes fresh operands, then keeps the best of its products
(:func:`scaling.workers.compute.matmul_ceiling_tflops`) and the best of its STREAM triads
(``a = b + s * c`` over arrays far larger than the caches, 12 bytes moved per float32 element,
as STREAM counts them) over at least ``MIN_S`` each. OUT gets both lists, one figure per
repeat: ``matmul_tflops`` and ``triad_GBps``.

Standard library plus torch.
"""

from __future__ import annotations

import time
from typing import Dict, List

from scaling.workers.compute import matmul_ceiling_tflops
from scaling.workers.matmul_worker import run_json

TRIAD_ELEMENTS = {"cpu": 1 << 24, "gpu": 1 << 28}
"""float32 elements per array: 64 MiB on a CPU, 1 GiB on a GPU, beyond any cache."""
MIN_S = 0.25
TRIAD_BYTES_PER_ELEMENT = 12


def triad_GBps(device, elements: int, synchronize) -> float:
    import torch

    b, c = (torch.rand(elements, device=device) for _ in range(2))
    a = torch.empty_like(b)
    torch.add(b, c, alpha=3.0, out=a)
    synchronize()
    times: List[float] = []
    while len(times) < 5 or sum(times) < MIN_S:
        started = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        synchronize()
        times.append(time.perf_counter() - started)
    return TRIAD_BYTES_PER_ELEMENT * elements / min(times) / 1e9


def measure(spec: Dict) -> Dict[str, List[float]]:
    import torch

    device_type = spec["device_type"]
    if device_type == "gpu":
        torch.cuda.set_device(spec["device_index"])
        device, synchronize = torch.device("cuda", spec["device_index"]), torch.cuda.synchronize
    else:
        torch.set_num_threads(spec["threads"])
        device, synchronize = torch.device("cpu"), (lambda: None)
    figures: Dict[str, List[float]] = {"matmul_tflops": [], "triad_GBps": []}
    for _ in range(spec["repeats"]):
        figures["matmul_tflops"].append(matmul_ceiling_tflops("torch", device_type, "float32"))
        figures["triad_GBps"].append(triad_GBps(device, TRIAD_ELEMENTS[device_type],
                                                synchronize))
    return figures


if __name__ == "__main__":
    run_json(measure)
