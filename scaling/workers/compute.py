"""Compute facts a worker measures before its warm-up, outside the timed window: the FLOPs of one
image in the cell's mode, counted on the framework's own graph by torch's rules, and a probe of the
matrix-product speed of one device at the cell's threads (beside the other ranks' probes: a
sentinel of the machine's speed; on CPU, ``mfu`` divides by the node's ceiling measured alone,
``scaling.execute.ceiling``).

FLOPs count a multiply-add as two. ``forward`` counts the forward pass; ``forward_backward``
and ``train`` count forward and backward (convolutions and matrix products, which is where the
work is, as torch's ``FlopCounterMode`` counts them; an optimizer update is elementwise; torch's
count is ``pytorch.flops``, JAX's and MXNet's are ``jax_flops`` and ``mxnet.flops``). Standard
library at import; each function imports its framework.
"""

from __future__ import annotations

import time
from typing import Dict, Optional

from scaling.workers.matmul_worker import KERNELS

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""The matrix dtype of each precision."""
CEILING_N = {"cpu": 1024, "gpu": 8192}
"""Side of the matrices of the ceiling's product on each device type."""
CEILING_REPEATS = 3
CEILING_MIN_S = 0.25
"""The ceiling's products go on for at least this long: on a CPU the first few products run
slower than later ones (the clock and the caches warm up), and a ceiling taken from them
would put a cell's fraction of it above 1."""


def _tensorflow_product_flops(op) -> int:
    """torch's count of a TensorFlow convolution or matrix product (0 for any other op): 2 x
    the forward convolution's output elements (the gradient it receives, for a backprop) x
    its filter's window and input features; 2 x the product's output elements x the
    contracted size."""
    if op.type == "MatMul":
        a = op.inputs[0].shape
        return 2 * op.outputs[0].shape.num_elements() * a[0 if op.get_attr("transpose_a") else 1]
    if op.type not in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
        return 0
    output = op.outputs[0] if op.type == "Conv2D" else op.inputs[2]
    kernel = op.outputs[0] if op.type == "Conv2DBackpropFilter" else op.inputs[1]
    return 2 * output.shape.num_elements() * kernel.shape[:3].num_elements()


def _ops_needed(tensors) -> set:
    """The ops that ``tensors`` depend on: a traced gradient also holds ops whose results
    nothing uses (the first convolution's input gradient), which never run."""
    needed, pending = set(), [t.op for t in tensors]
    while pending:
        op = pending.pop()
        if op not in needed:
            needed.add(op)
            pending.extend(t.op for t in op.inputs)
    return needed


def tensorflow_flops_per_image(tf, build_model, workload, image_size: int, mode: str) -> float:
    """torch's count of the convolutions and matrix products of the step's TensorFlow graph
    that its outputs need, for one image, on a fresh copy of the model made by
    ``build_model()``, traced and never run. TensorFlow's own graph cost analysis counts
    elementwise ops and unused gradients too, and approximates a backprop from its input
    size over the stride: up to 10% above torch's count of the same network."""
    model = build_model()

    def step(images):
        if mode == "forward":
            return model(images, training=False)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(images, training=True))
        return loss, tape.gradient(loss, model.trainable_variables)

    spec = tf.TensorSpec([1, image_size, image_size, workload.channels], tf.float32)
    traced = tf.function(step, autograph=False).get_concrete_function(spec)
    return float(sum(map(_tensorflow_product_flops, _ops_needed(traced.outputs))))


def matmul_ceiling_tflops(framework: str, device_type: str, dtype: str) -> Optional[float]:
    """The best of the products of two square matrices on one device over at least
    ``CEILING_MIN_S`` (and ``CEILING_REPEATS`` products), in TFLOP/s, with the threads the
    process already has; None where the framework has no matrix kernel."""
    if framework not in KERNELS:
        return None
    make, product_sum, _, _, _ = KERNELS[framework](device_type, dtype)
    n = CEILING_N[device_type]
    matrix = make(n)
    product_sum(matrix)
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
    them too: what a cell allocates for them counts against its memory."""
    probe = matmul_ceiling_tflops(cell["framework"], cell["device_type"], DTYPES[precision])
    return {"flops_per_image": flops_per_image() if flops_per_image else None,
            "gradient_bytes": None if cell["mode"] == "forward" else gradient_bytes,
            "precision": precision,
            "matmul_probe_tflops": probe / devices_sharing if probe else None}
