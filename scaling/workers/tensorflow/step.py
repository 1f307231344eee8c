"""The step of a TensorFlow session: one replica's computation in a mode, and the tf.functions
that run it on every replica of the process through ``strategy.run``."""

from __future__ import annotations

from scaling.workers.tensorflow.model import Trainable


class ReplicaSteps:
    """The step functions of ``trainable`` under ``strategy``. Each returns every local
    replica's result: its loss, or in forward_backward the sum of the aggregated gradients."""

    def __init__(self, tf, strategy, parallel, trainable: Trainable, xla: bool):
        self.tf, self.strategy, self.parallel = tf, strategy, parallel
        self.trainable, self.xla = trainable, xla

    def _over_replicas(self, replica):
        """``replica(images, labels)``, one tf.function (``jit_compile`` under xla), run on
        every replica of the process: a function of the per-replica images and labels."""
        strategy = self.strategy
        replica_step = self.tf.function(replica, jit_compile=self.xla)
        return lambda images, labels: strategy.experimental_local_results(
            strategy.run(replica_step, args=(images, labels)))

    def on_inputs(self, mode: str, images, labels):
        """One step in ``mode`` over every replica of the process, on the same per-replica
        ``images`` and ``labels`` at every call."""
        run = self._over_replicas(lambda images, labels: self.replica(mode, images, labels))
        return self.tf.function(lambda: run(images, labels))

    def on_batches(self, mode: str, batches):
        """One step in ``mode`` over every replica of the process, on the next batches of the
        distributed iterator ``batches``, taken inside the tf.function."""
        run = self._over_replicas(lambda images, labels: self.replica(mode, images, labels))
        step = self.tf.function(lambda batches: run(*next(batches)))
        return lambda: step(batches)

    def local(self, images, labels):
        """A forward and backward pass on every replica of the process, with no gradient
        aggregated (the tape is not the mechanism's) and no update; each replica's result is
        the sum of its gradients."""
        tf = self.tf

        def replica(images, labels):
            grads = self.gradients(images, labels, lambda tape: tape)[1]
            return tf.add_n([tf.reduce_sum(tf.cast(grad, tf.float32)) for grad in grads])

        run = self._over_replicas(replica)
        return tf.function(lambda: run(images, labels))

    def replica(self, mode: str, images, labels):
        tf, model = self.tf, self.trainable.model
        if mode == "forward":
            return tf.reduce_sum(tf.cast(model(images, training=False), tf.float32))
        loss, grads = self.gradients(images, labels, self.parallel.gradient_tape)
        if mode == "train":
            self.trainable.optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        # Returned, so that the aggregated gradients are computed rather than pruned.
        return tf.add_n([tf.reduce_sum(tf.cast(grad, tf.float32))
                         for grad in self.parallel.aggregate(grads)])

    def gradients(self, images, labels, wrap_tape):
        """The replica's loss and gradients, through the tape ``wrap_tape`` returns."""
        tf, trainable = self.tf, self.trainable
        with tf.GradientTape() as tape:
            logits = tf.cast(trainable.model(images, training=True), tf.float32)
            loss = tf.nn.compute_average_loss(trainable.loss_fn(labels, logits),
                                              global_batch_size=trainable.global_batch)
            scaled = trainable.scale_loss(loss)
        return loss, trainable.unscale(
            wrap_tape(tape).gradient(scaled, trainable.model.trainable_variables))
