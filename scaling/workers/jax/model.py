"""A JAX session's Flax model, its optimizer and its state on the devices; the persistent cache
of the initialisers its construction compiles."""

from __future__ import annotations

import contextlib
import math
import os

from scaling.workers.common import USER_CACHE

INITIALISER_CACHE = os.path.join(USER_CACHE, "jax-initialisers")
"""Where :func:`cached_initialisers` keeps the compiled initialisers, per user, as pip keeps
its wheels."""


@contextlib.contextmanager
def cached_initialisers(jax):
    """Inside, XLA's persistent compilation cache writes every program compiled, to
    ``INITIALISER_CACHE``; after, it writes none. A Flax model's construction compiles one
    initialiser per kernel shape (a truncated normal, about 0.2 s each on a CPU core, 20 s for
    GoogLeNet's), and later processes load them instead. The step, compiled after, is never
    written, so ``compile_s`` stays a compile. A cache folder the user set is left alone."""
    from jax.experimental.compilation_cache import compilation_cache

    if jax.config.jax_compilation_cache_dir not in (None, "", INITIALISER_CACHE):
        yield
        return
    if jax.config.jax_compilation_cache_dir != INITIALISER_CACHE:
        jax.config.update("jax_compilation_cache_dir", INITIALISER_CACHE)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        compilation_cache.reset_cache()  # in case this process compiled before, cache off
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    try:
        yield
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", math.inf)


def build_model(jax, nnx, workload, cell: dict, amp: bool):
    """The workload's model, in evaluation mode for ``forward`` and in training mode otherwise,
    split into its graph, its parameters, its BatchNorm statistics and the rest."""
    with cached_initialisers(jax):
        model = workload.builder(cell["models"])(cell["image_size"], workload.classes)
    if cell["mode"] == "forward":
        model.eval()
    else:
        model.train()
    if amp:
        # Every layer computes in bfloat16; its parameters stay float32 (param_dtype).
        model.set_attributes(dtype=jax.numpy.bfloat16, raise_if_not_found=False)
    return nnx.split(model, nnx.Param, nnx.BatchStat, ...)


def optimizer(optax, workload):
    """optax's SGD with momentum, or Adam for a workload that names it."""
    return optax.adam(0.001) if workload.optimizer == "adam" else optax.sgd(0.01, momentum=0.9)


def initial_state(jax, parallel, tx, mode: str, params, stats, rest) -> tuple:
    """The state, replicated on the devices: the parameters, the BatchNorm statistics, the rest
    and, in ``train``, the optimizer's state."""
    replicated = jax.sharding.PartitionSpec()
    state = jax.tree.map(lambda leaf: parallel.put(leaf, replicated), (params, stats, rest))
    if mode == "train":
        state = (*state, jax.jit(tx.init)(state[0]))
    return state
