"""One TensorFlow process: ``python -m scaling.workers.tensorflow CELL_DIR``.

The cell's ``data_parallel`` picks the mechanism (``scaling.workers.tensorflow.strategies``):
``mirrored`` drives N devices with MirroredStrategy; ``multiworker`` is one worker of a
MultiWorkerMirroredStrategy cluster described by TF_CONFIG; ``horovod`` is one Horovod rank on
one device. The step is a ``tf.function`` run through ``strategy.run``; warm-up covers tracing
and compilation. Steps are not waited for one by one: at chunk boundaries the last step's
results are materialized on the host, which waits for every step queued before it. Modes:
``forward`` runs the model with ``training=False`` and no tape; ``forward_backward`` computes
the gradients, aggregates them over the replicas as ``apply_gradients`` would, and applies
none. Each replica's synthetic batch is seeded by its cell-wide index; on real data
(``scaling.workers.tensorflow.input``) the step takes the next batch of a distributed iterator
inside its tf.function, so that input and step are one call. Options: ``xla``
(``jit_compile``) and ``mixed_precision`` (the ``mixed_float16`` policy, with loss scaling).
"""
