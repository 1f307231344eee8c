"""A plain hand-written JAX training loop, the reference the harness's JAX path is compared
with: JAX's documented data-parallel style, where one ``jax.jit`` step takes a batch sharded
over a one-axis device mesh (``NamedSharding``) and replicated state, and XLA partitions the
step itself (no ``shard_map``). The Flax NNX model, optax SGD with momentum, N host devices:

    python bench/plain_jax.py WORKLOAD DEVICES BATCH IMAGE_SIZE STEPS WARMUP THREADS OUT_JSON
"""

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from workloads import get_workload


def main():
    workload, devices, batch, size, steps, warmup, _threads, out = sys.argv[1:9]
    devices, batch, size = int(devices), int(batch), int(size)
    steps, warmup = int(steps), int(warmup)
    jax.config.update("jax_num_cpu_devices", devices)
    spec = get_workload(workload)
    mesh = Mesh(np.array(jax.devices()[:devices]), ("data",))
    replicated, sharded = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))
    model = spec.builder("workloads.flax_models")(size, spec.classes)
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    tx = optax.sgd(0.01, momentum=0.9)
    params, rest = jax.device_put((params, rest), replicated)
    opt_state = jax.jit(tx.init)(params)
    rng = np.random.default_rng(0)
    images = jax.device_put(rng.standard_normal((batch * devices, size, size, 3), np.float32),
                            sharded)
    labels = jax.device_put(rng.integers(0, spec.classes, batch * devices).astype(np.int32),
                            sharded)

    def loss_fn(params, rest, images, labels):
        model = nnx.merge(graph, params, rest, copy=True)
        logits = model(images)
        _, _, rest = nnx.split(model, nnx.Param, ...)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), rest

    @jax.jit
    def step(params, rest, opt_state, images, labels):
        (_, rest), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rest, images, labels)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), rest, opt_state

    for index in range(warmup + steps):
        if index == warmup:
            jax.block_until_ready(params)
            start = time.perf_counter()
        params, rest, opt_state = step(params, rest, opt_state, images, labels)
    jax.block_until_ready(params)
    elapsed = time.perf_counter() - start
    with open(out, "w") as result:
        json.dump({"images_per_sec": batch * devices * steps / elapsed}, result)


if __name__ == "__main__":
    main()
