"""One JAX process: ``python -m scaling.workers.jax CELL_DIR``.

The model is the workload's Flax NNX module (``workloads.flax_models``), split into its graph and
its state (parameters, BatchNorm statistics, the rest) so that a step is one pure ``jax.jit``
over the state, with optax's SGD with momentum (Adam for the MNIST MLP). The cell's
``data_parallel`` picks how the step spans the devices (``scaling.workers.jax.parallel``).

The step is compiled ahead of time, before the warm-up, and the compile time is reported as
``compile_s``. Dispatch is asynchronous: the timed loop waits for the device
(``block_until_ready``) only at chunk boundaries. XLA's ``RESOURCE_EXHAUSTED`` is out of memory.

Options: ``amp`` (every layer computes in bfloat16, its ``dtype``, over float32 parameters and
optimizer state, the loss in float32) and ``donate`` (true unless set false: the step donates the
buffers of the state it replaces, so the state is updated in place). Modes: ``train``; ``forward``
(the model in evaluation mode, no collective); ``forward_backward`` (the gradients, averaged over
the devices, are the step's output, with no update). Each replica's synthetic batch is seeded by
its index in the cell; on real data (``scaling.workers.jax.input``) a step takes the next batch
of the process's Grain pipeline, sharded over its devices.
"""
