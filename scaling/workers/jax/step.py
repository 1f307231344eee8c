"""The step of a JAX session: pure functions of the model's state by mode, compiled with
``jax.jit`` over the mechanism's devices, and the FLOPs of one image through them."""

from __future__ import annotations

import time

from scaling.workers.jax import communication


class JaxStep:
    """The step of the model ``graph`` in the cell's mode, with the optimizer ``tx``, over
    the state (parameters, BatchNorm statistics, the rest, and in train the optimizer's
    state)."""

    def __init__(self, jax, nnx, parallel, cell: dict, graph, tx):
        self.jax, self.nnx, self.parallel, self.graph, self.tx = jax, nnx, parallel, graph, tx
        self.mode, self.amp = cell["mode"], bool(cell["options"].get("amp"))
        self.donate = cell["options"].get("donate", True) and self.mode != "forward"

    def loss(self, params, stats, rest, images, labels):
        """The mean cross-entropy of one device's batch, and its updated BatchNorm statistics
        and other state."""
        import jax.numpy as jnp
        import optax

        if self.amp:
            images = images.astype(jnp.bfloat16)
        model = self.nnx.merge(self.graph, params, stats, rest, copy=True)
        logits = model(images).astype(jnp.float32)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        _, _, stats, rest = self.nnx.split(model, self.nnx.Param, self.nnx.BatchStat, ...)
        return loss, (stats, rest)

    def per_device(self):
        """The step of one device, by mode, with its state in and out."""
        import optax

        jax, mean = self.jax, self.parallel.mean

        def gradients(params, stats, rest, images, labels):
            (_, (stats, rest)), grads = jax.value_and_grad(self.loss, has_aux=True)(
                params, stats, rest, images, labels)
            return mean(grads), mean(stats), rest

        def train(params, stats, rest, opt_state, images, labels):
            grads, stats, rest = gradients(params, stats, rest, images, labels)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), stats, rest, opt_state

        def forward_backward(params, stats, rest, images, labels):
            grads, stats, rest = gradients(params, stats, rest, images, labels)
            return params, stats, rest, grads

        def forward(params, stats, rest, images, labels):
            model = self.nnx.merge(self.graph, params, stats, rest, copy=True)
            return model(images.astype("bfloat16") if self.amp else images)

        return {"train": train, "forward_backward": forward_backward, "forward": forward}[
            self.mode]

    def compile(self, state: tuple, images, labels, report: dict):
        """The jitted step, compiled for ``state`` and the batch before the warm-up; its
        compile time goes into ``report``."""
        from jax.sharding import PartitionSpec

        replicated, sharded = PartitionSpec(), PartitionSpec("data")
        state_specs = (replicated,) * len(state)
        out_specs = sharded if self.mode == "forward" else \
            state_specs + ((replicated,) if self.mode == "forward_backward" else ())
        step = self.parallel.wrap(self.per_device(), state_specs + (sharded, sharded),
                                  out_specs)
        donate = tuple(range(len(state))) if self.donate else ()
        started = time.perf_counter()
        compiled = self.jax.jit(step, donate_argnums=donate).lower(
            *state, images, labels).compile()
        report["compile_s"] = time.perf_counter() - started
        report["communication_in_effect"] = communication.in_effect(compiled.as_text())
        return compiled

    def compile_local(self):
        """The jitted forward and backward pass of each device on its own batch, returning the
        sum of its gradients (so that none is left out). Over several processes, each runs its
        own device's arrays in a program of its own, so that no program spans the processes
        (one would interleave with the collective timed beside it)."""
        from jax.sharding import PartitionSpec

        jax = self.jax

        def local(params, stats, rest, images, labels):
            _, grads = jax.value_and_grad(self.loss, has_aux=True)(params, stats, rest,
                                                                     images, labels)
            return sum(jax.numpy.sum(leaf) for leaf in jax.tree.leaves(grads)).reshape(1)

        if jax.process_count() > 1:
            return jax.jit(local)
        sharded = PartitionSpec("data")
        return jax.jit(self.parallel.wrap(local, (PartitionSpec(),) * 3 + (sharded, sharded),
                                          sharded))

    def flops_per_image(self, state: tuple, image_shape) -> float:
        """One image's FLOPs in the cell's mode, counted on the model's jaxpr by torch's rules
        (``scaling.workers.jax.flops``): the forward pass in ``forward``, otherwise forward and
        backward (an update is elementwise, as the other frameworks' counters leave it out)."""
        from scaling.workers.jax import flops

        jax = self.jax
        shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state[:3])
        return flops.flops_per_image(jax, self.nnx, self.graph, shapes, image_shape, self.mode)
