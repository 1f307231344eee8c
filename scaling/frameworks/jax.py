"""JAX with Flax NNX models and optax: workers in the harness's own interpreter."""

from scaling.frameworks.base import Framework, register_framework

register_framework(Framework(
    name="jax",
    module="jax",
    install_hint="install it with: pip install -e '.[jax]' (or '.[jax-cuda]' on a GPU machine)",
    worker="scaling.workers.jax",
    models="workloads.flax_models",
    default_launcher="jax",
    options={
        # bf16 forward and backward over float32 parameters and optimizer state.
        "amp": bool,
        # The step donates the buffers of the state it replaces (true unless set false).
        "donate": bool,
    },
    env={"TF_CPP_MIN_LOG_LEVEL": "1"},
    # Measured with jaxlib 0.10.2 under jax-distributed: at 400 MiB the runtime could not start
    # its threads; 640 MiB trained cifar10.
    min_memory_limit=640 * 2**20,
    packages=("jax", "jaxlib", "flax", "optax"),
    colour="#2ca02c",
))
