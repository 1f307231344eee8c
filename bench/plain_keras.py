"""A plain hand-written Keras + MirroredStrategy training loop, the reference the harness's
TensorFlow path is compared with.

    python bench/plain_keras.py WORKLOAD DEVICES BATCH IMAGE_SIZE STEPS WARMUP THREADS OUT_JSON

Splits the CPU into DEVICES logical devices, trains with strategy.run in a tf.function, and
writes {"images_per_sec": ...} to OUT_JSON.
"""

import json
import sys
import time

import tensorflow as tf


def main():
    workload, devices, batch, size, steps, warmup, threads, out = sys.argv[1:9]
    devices, batch, size = int(devices), int(batch), int(size)
    steps, warmup, threads = int(steps), int(warmup), int(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads * devices)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(devices)])
    strategy = tf.distribute.MirroredStrategy(
        devices=[f"/cpu:{i}" for i in range(devices)],
        cross_device_ops=tf.distribute.ReductionToOneDevice(reduce_to_device="/cpu:0"))

    import keras

    from workloads import get_workload

    spec = get_workload(workload)
    with strategy.scope():
        model = spec.builder("workloads.keras_models")(size, spec.classes)
        optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    images, labels = strategy.experimental_distribute_values_from_function(lambda ctx: (
        tf.random.uniform([batch, size, size, 3]),
        tf.random.uniform([batch], maxval=spec.classes, dtype=tf.int32)))

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                              global_batch_size=batch * devices)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step():
        return strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(replica_step, args=(images, labels)), axis=None)

    for _ in range(warmup):
        step().numpy()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.numpy()
    elapsed = time.perf_counter() - start
    with open(out, "w") as result:
        json.dump({"images_per_sec": batch * devices * steps / elapsed}, result)


if __name__ == "__main__":
    main()
