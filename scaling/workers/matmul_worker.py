"""The matrix benchmark in one process: ``python -m scaling.workers.matmul_worker SPEC OUT``.

For each n: an n x n random matrix A is made on the device (not timed), one untimed product
warms up, then each repeat times ``sum(A @ A.T)`` from a synchronized device to the sum on the
host. The sum is checked against its closed form, sum_k (sum_i a_ik)^2, computed in float64
from A's column sums, so a wrong kernel is caught. ``SCALING_MATMUL_FAULT=wrong-product``
multiplies A by A instead (fault injection, for the check's own test).

Standard library plus the framework named in the spec (torch, tensorflow or jax).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, Dict, List, Tuple

FAULT_ENV = "SCALING_MATMUL_FAULT"
TOLERANCE = {"float64": 1e-9, "float32": 1e-3, "float16": 5e-2, "bfloat16": 5e-2}
"""Largest relative error of the sum accepted for each dtype."""


def check_sum(got: float, expected: float, dtype: str) -> None:
    error = abs(got - expected) / max(abs(expected), 1e-30)
    if error > TOLERANCE[dtype]:
        raise ArithmeticError(f"the product is wrong: sum {got:.6g}, closed form "
                              f"{expected:.6g} (relative error {error:.2g})")


def torch_kernel(device_type: str, dtype: str) -> Tuple[Callable, Callable, Callable, str, Dict]:
    import torch

    device = torch.device("cuda" if device_type == "gpu" else "cpu")
    wrong = os.environ.get(FAULT_ENV) == "wrong-product"

    def make(n: int):
        return torch.rand(n, n, device=device, dtype=getattr(torch, dtype))

    def product_sum(a) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return float((a @ (a if wrong else a.T)).sum(dtype=torch.float64).item())

    def to_host(a):
        return a.to(torch.float64).cpu().numpy()

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return make, product_sum, to_host, name, {"torch": torch.__version__}


def tensorflow_kernel(device_type: str, dtype: str
                      ) -> Tuple[Callable, Callable, Callable, str, Dict]:
    import tensorflow as tf

    device = "/GPU:0" if device_type == "gpu" else "/CPU:0"
    wrong = os.environ.get(FAULT_ENV) == "wrong-product"

    def make(n: int):
        with tf.device(device):
            return tf.random.uniform([n, n], dtype=getattr(tf, dtype))

    @tf.function
    def product(a):
        c = tf.matmul(a, a, transpose_b=not wrong)
        return tf.reduce_sum(tf.cast(c, tf.float64))

    def product_sum(a) -> float:
        with tf.device(device):
            return float(product(a).numpy())

    def to_host(a):
        return tf.cast(a, tf.float64).numpy()

    return make, product_sum, to_host, device, {"tensorflow": tf.__version__}


def jax_kernel(device_type: str, dtype: str) -> Tuple[Callable, Callable, Callable, str, Dict]:
    import jax

    if dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    device = jax.local_devices(backend="gpu" if device_type == "gpu" else "cpu")[0]
    wrong = os.environ.get(FAULT_ENV) == "wrong-product"
    total = jnp.float64 if dtype == "float64" else jnp.float32

    def make(n: int):
        key = jax.device_put(jax.random.key(0), device)
        return jax.random.uniform(key, (n, n), dtype=getattr(jnp, dtype))

    @jax.jit
    def product(a):
        return jnp.sum(a @ (a if wrong else a.T), dtype=total)

    def product_sum(a) -> float:
        return float(product(a))

    def to_host(a):
        import numpy

        return numpy.asarray(a.astype(total), dtype=numpy.float64)

    return make, product_sum, to_host, device.device_kind, {"jax": jax.__version__}


KERNELS = {"torch": torch_kernel, "tensorflow": tensorflow_kernel, "jax": jax_kernel}
"""Each framework's kernel, by the framework's registered name."""


def closed_form(matrix) -> float:
    """sum_k (sum_i a_ik)^2 of a float64 host array: the sum of A @ A.T."""
    columns = matrix.sum(axis=0)
    return float((columns * columns).sum())


def measure(spec: Dict) -> List[Dict]:
    make, product_sum, to_host, device_name, versions = KERNELS[spec["framework"]](
        spec["device_type"], spec["dtype"])
    results = []
    for n in spec["sizes"]:
        row = {"n": n, "device_name": device_name, "versions": versions}
        try:
            a = make(n)
            check_sum(product_sum(a), closed_form(to_host(a)), spec["dtype"])
            times = []
            for _ in range(spec["repeats"]):
                started = time.perf_counter()
                product_sum(a)
                times.append(time.perf_counter() - started)
            row.update(status="ok", seconds_all=times)
        except ArithmeticError as error:
            row.update(status="error", error=str(error))
        except Exception as error:  # out of memory, or any other failure of this size
            row.update(status="oom" if "memory" in str(error).lower() else "error",
                       error=f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
        results.append(row)
    return results


def run_json(measure: Callable[[Dict], object]) -> None:
    """``python -m WORKER SPEC OUT``: read the JSON spec, write what ``measure`` returns."""
    with open(sys.argv[1]) as spec_file:
        spec = json.load(spec_file)
    with open(sys.argv[2], "w") as out:
        json.dump(measure(spec), out)


if __name__ == "__main__":
    run_json(measure)
