"""The matmul ceiling of one CPU device, in a process of its own:
``python -m scaling.workers.ceiling_worker SPEC OUT``.

The spec names the framework, the device's threads, the dtype and the repeats. The process takes
the device's threads as the cell's workers do, then each repeat makes a fresh matrix and keeps
the best product over at least 0.25 s (:func:`scaling.workers.compute.matmul_ceiling_tflops`).
OUT gets the repeats' TFLOP/s, a JSON list.

Standard library plus the framework named in the spec.
"""

from __future__ import annotations

from typing import Dict, List

from scaling.workers.compute import matmul_ceiling_tflops
from scaling.workers.matmul_worker import run_json


def take_threads(framework: str, threads: int) -> None:
    """Give this process ``threads`` threads, as the framework's worker gives one device."""
    if framework == "torch":
        import torch

        torch.set_num_threads(threads)
    elif framework == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
    elif framework == "jax":
        from scaling.workers.jax.parallel import claim_cores

        claim_cores(threads, 0)


def measure(spec: Dict) -> List[float]:
    take_threads(spec["framework"], spec["threads"])
    return [matmul_ceiling_tflops(spec["framework"], "cpu", spec["dtype"])
            for _ in range(spec["repeats"])]


if __name__ == "__main__":
    run_json(measure)
