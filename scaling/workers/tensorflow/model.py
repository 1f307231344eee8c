"""A TensorFlow session's Keras model and its optimizer, built under the strategy's scope, the
same on every process."""

from __future__ import annotations

from typing import Callable, NamedTuple


class Trainable(NamedTuple):
    """A Keras model and what its step needs to train it."""

    model: object
    optimizer: object
    scale_loss: Callable
    """Scales the loss before the gradients are taken (the identity without mixed precision)."""
    unscale: Callable
    """Unscales the gradients taken of the scaled loss."""
    loss_fn: object
    global_batch: int
    """Images of one step over every replica of the cell: the loss is averaged over them."""


def loss_scaling(optimizer, mixed_precision: bool):
    """(scale the loss, unscale the gradients) for ``optimizer``.

    Keras 3 scales the loss with ``scale_loss`` and unscales in ``apply_gradients``; Keras 2
    (TensorFlow 2.15, which Horovod builds against) scales and unscales by hand."""
    if not mixed_precision:
        return (lambda loss: loss), (lambda grads: grads)
    if hasattr(optimizer, "scale_loss"):
        return optimizer.scale_loss, (lambda grads: grads)
    return optimizer.get_scaled_loss, optimizer.get_unscaled_gradients


def build_model(keras, strategy, parallel, workload, cell: dict) -> Trainable:
    """The model and its optimizer under ``strategy``'s scope, the same on every process."""
    mixed_precision = bool(cell["options"].get("mixed_precision"))
    if mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_float16")
    with strategy.scope():
        model = workload.builder(cell["models"])(cell["image_size"], workload.classes)
        optimizer = (keras.optimizers.Adam(learning_rate=0.001)
                     if workload.optimizer == "adam"
                     else keras.optimizers.SGD(learning_rate=0.01, momentum=0.9))
        if mixed_precision:
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
    scale_loss, unscale = loss_scaling(optimizer, mixed_precision)
    parallel.broadcast(model.variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    return Trainable(model, optimizer, scale_loss, unscale, loss_fn,
                     cell["batch_size"] * strategy.num_replicas_in_sync)
