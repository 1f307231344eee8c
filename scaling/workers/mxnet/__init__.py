"""One MXNet process driving N contexts: ``python -m scaling.workers.mxnet CELL_DIR``.

Runs under MXNet's own interpreter, so it imports only the standard library, MXNet and the
workload definitions. On synthetic data each context holds one batch of its own, seeded by its
cell-wide replica index; on real data (``scaling.workers.mxnet.input``) a step takes the
loader's next process batch and splits it over the contexts with ``split_and_load``. MXNet's
engine is asynchronous: steps are queued, and ``mx.nd.waitall()`` at chunk boundaries waits for
them; errors raised inside the engine surface there, inside the report. The cell's
``data_parallel`` picks the mechanism: ``kvstore`` (one process over all contexts, a kvstore
Trainer) or ``horovod`` (one Horovod rank per context, ``hvd.DistributedTrainer`` after a
broadcast of the parameters). Option ``amp``: ``mxnet.contrib.amp`` with
float16 on GPU and bfloat16 on CPU, with a dynamic loss scale. Modes: ``forward`` runs the
network outside ``autograd.record``; ``forward_backward`` computes gradients and aggregates them
(``allreduce_grads``, whose kvstore then keeps no optimizer) without an update.

The package: ``session`` (the session the timed loop drives, and ``build``), ``model`` (the
network, its trainer and loss, and ``amp``), ``hooks`` (the loop's profile hook), ``device``
(the contexts and their memory), ``parallel`` (the data-parallel mechanisms), ``collective``
(their allreduce), ``input`` (real images) and ``flops`` (the FLOPs counter).
"""
