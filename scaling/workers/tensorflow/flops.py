"""FLOPs of one image of a Keras model, counted on its traced TensorFlow graph by the rules of
torch's ``FlopCounterMode`` (multiply-add = 2), as ``scaling.workers.compute`` counts the
others: the convolutions and matrix products, where the work is. The model is traced and never
run.
"""

from __future__ import annotations


def _product_flops(op) -> int:
    """torch's count of a TensorFlow convolution or matrix product (0 for any other op): 2 x
    the forward convolution's output elements (the gradient it receives, for a backprop) x
    its filter's window and input features; 2 x the product's output elements x the
    contracted size."""
    if op.type == "MatMul":
        a = op.inputs[0].shape
        return 2 * op.outputs[0].shape.num_elements() * a[0 if op.get_attr("transpose_a") else 1]
    if op.type not in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
        return 0
    output = op.outputs[0] if op.type == "Conv2D" else op.inputs[2]
    kernel = op.outputs[0] if op.type == "Conv2DBackpropFilter" else op.inputs[1]
    return 2 * output.shape.num_elements() * kernel.shape[:3].num_elements()


def _ops_needed(tensors) -> set:
    """The ops that ``tensors`` depend on: a traced gradient also holds ops whose results
    nothing uses (the first convolution's input gradient), which never run."""
    needed, pending = set(), [t.op for t in tensors]
    while pending:
        op = pending.pop()
        if op not in needed:
            needed.add(op)
            pending.extend(t.op for t in op.inputs)
    return needed


def flops_per_image(tf, build_model, workload, image_size: int, mode: str) -> float:
    """torch's count of the convolutions and matrix products of the step's TensorFlow graph
    that its outputs need, for one image, on a fresh copy of the model made by
    ``build_model()``, traced and never run. TensorFlow's own graph cost analysis counts
    elementwise ops and unused gradients too, and approximates a backprop from its input
    size over the stride: up to 10% above torch's count of the same network."""
    model = build_model()

    def step(images):
        if mode == "forward":
            return model(images, training=False)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(images, training=True))
        return loss, tape.gradient(loss, model.trainable_variables)

    spec = tf.TensorSpec([1, image_size, image_size, workload.channels], tf.float32)
    traced = tf.function(step, autograph=False).get_concrete_function(spec)
    return float(sum(map(_product_flops, _ops_needed(traced.outputs))))
