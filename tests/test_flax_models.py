"""The Flax NNX workloads (``workloads.flax_models``) match the PyTorch definitions: parameter
counts, logits at the smallest inputs torch accepts, and the outputs themselves given torch's
weights."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from scaling.workers.jax.model import cached_initialisers
from workloads import WORKLOADS

MODELS = "workloads.flax_models"
BATCH_NORM = ("googlenet", "resnet50", "inception_v3")
"""The workloads with batch norm, whose many initialisers take CPU seconds to compile."""


def flax_parameters(model) -> int:
    return sum(leaf.size for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)))


def torch_parameters() -> dict:
    """Each workload's trainable parameter count in PyTorch at its nominal size, counted in this
    process (which imports torch for the tests below anyway) on models built on the meta
    device, as the torch worker's FLOP counter builds them: shapes only, nothing initialised."""
    import torch

    counts = {}
    with torch.device("meta"):
        for workload in WORKLOADS.values():
            model = workload.builder("workloads.torch_models")(workload.input_size,
                                                               workload.classes)
            counts[workload.name] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return counts


@pytest.mark.slow
def test_parameter_counts_equal_pytorchs_and_logits_have_the_classes_at_the_nominal_size():
    counts = {}
    for workload in WORKLOADS.values():
        size, classes = workload.input_size, workload.classes
        model = nnx.eval_shape(lambda: workload.builder(MODELS)(size, classes))
        counts[workload.name] = flax_parameters(model)
        images = jax.ShapeDtypeStruct((2, size, size, workload.channels), jnp.float32)
        assert nnx.eval_shape(lambda m, x: m(x), model, images).shape == (2, classes)
    assert counts == torch_parameters()
    assert counts["alexnet"] == 61_100_840 and counts["mnist_mlp"] == 2_797_010


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow) if name in BATCH_NORM else name
    for name in WORKLOADS])
def test_each_workload_trains_and_evaluates_at_its_smallest_input(name):
    """Training mode updates the batch-norm statistics; evaluation mode leaves them and is
    deterministic."""
    workload = WORKLOADS[name]
    size = workload.min_image_size
    with cached_initialisers(jax):
        model = workload.builder(MODELS)(size, 5)
    images = jax.random.normal(jax.random.key(0), (2, size, size, workload.channels))
    forward = nnx.jit(lambda model, images: model(images))
    stats = jax.tree.leaves(nnx.state(model, nnx.BatchStat))
    assert bool(stats) == (name in BATCH_NORM)
    logits = forward(model, images)
    assert logits.shape == (2, 5) and bool(jnp.isfinite(logits).all())
    updated = jax.tree.leaves(nnx.state(model, nnx.BatchStat))
    assert not any(np.allclose(a, b) for a, b in zip(stats, updated))
    model.eval()
    np.testing.assert_array_equal(forward(model, images), forward(model, images))
    for before, after in zip(updated, jax.tree.leaves(nnx.state(model, nnx.BatchStat))):
        np.testing.assert_array_equal(before, after)


def test_local_response_norm_is_tensorflows():
    from workloads.flax_models import local_response_norm

    x = np.random.default_rng(0).standard_normal((1, 2, 2, 12)).astype("float32") * 10
    padded = np.pad(x * x, ((0, 0), (0, 0), (0, 0), (4, 4)))
    sums = np.stack([padded[..., c:c + 9].sum(-1) for c in range(12)], -1)
    expected = x / (1 + 0.001 / 9 * sums) ** 0.75
    np.testing.assert_allclose(local_response_norm(jnp.asarray(x)), expected, rtol=1e-5)


@pytest.mark.parametrize("side", [4, 5, 16, 17])
def test_resnets_max_pool_is_torchs_and_pads_only_what_its_windows_read(side):
    """torch's MaxPool2d(3, 2, padding=1) at even and odd sides, with the padding after each
    side cut to what the last window reads: none at an even side, as the Flax ImageNet
    example's SAME pool has (a larger padded map costs its gradient's scatter)."""
    import torch

    from workloads.flax_models import _torch_max_pool

    pool = _torch_max_pool(3, 2, 1)
    x = np.random.default_rng(side).standard_normal((2, side, side, 3)).astype("float32")
    expected = torch.nn.functional.max_pool2d(
        torch.from_numpy(x.transpose(0, 3, 1, 2)), 3, 2, 1).numpy().transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(pool(jnp.asarray(x)), expected)
    (eqn,) = jax.make_jaxpr(pool)(jnp.asarray(x)).jaxpr.eqns
    assert eqn.params["padding"][1:3] == ((1, side % 2),) * 2


def _copy_torch_weights(torch_model, flax_model, flatten_chw=None) -> None:
    """Copies each torch convolution, linear and batch-norm layer into the Flax layer in the same
    place, after randomising torch's batch-norm parameters and statistics. ``flatten_chw``: the
    (channels, height, width) that the first linear layer flattens, whose rows Flax orders by
    (height, width, channels)."""
    import torch

    kinds = {torch.nn.Conv2d: nnx.Conv, torch.nn.Linear: nnx.Linear,
             torch.nn.BatchNorm2d: nnx.BatchNorm}
    layers = [m for m in torch_model.modules() if type(m) in kinds]
    flax_layers = [m for _, m in nnx.iter_modules(flax_model) if type(m) in kinds.values()]
    assert [kinds[type(m)] for m in layers] == [type(m) for m in flax_layers]
    generator = torch.Generator().manual_seed(0)
    for layer, flax_layer in zip(layers, flax_layers):
        weight = layer.weight.detach()
        if isinstance(layer, torch.nn.BatchNorm2d):
            assert flax_layer.epsilon == layer.eps
            for tensor in (layer.weight, layer.bias, layer.running_mean, layer.running_var):
                tensor.data = torch.rand(tensor.shape, generator=generator) + 0.5
            flax_layer.scale[...] = jnp.asarray(layer.weight.detach().numpy())
            flax_layer.mean[...] = jnp.asarray(layer.running_mean.numpy())
            flax_layer.var[...] = jnp.asarray(layer.running_var.numpy())
        elif isinstance(layer, torch.nn.Conv2d):
            flax_layer.kernel[...] = jnp.asarray(weight.numpy().transpose(2, 3, 1, 0))
        else:
            if flatten_chw:
                weight = weight.reshape(-1, *flatten_chw).permute(0, 2, 3, 1).flatten(1)
                flatten_chw = None
            flax_layer.kernel[...] = jnp.asarray(weight.numpy().T)
        if layer.bias is not None:
            flax_layer.bias[...] = jnp.asarray(layer.bias.detach().numpy())


@pytest.mark.slow
@pytest.mark.parametrize("name, size, flatten_chw", [
    ("alexnet", 63, (256, 6, 6)), ("googlenet", 33, None), ("resnet50", 33, None),
    ("resnet50", 32, None),
    ("inception_v3", 75, None), ("cifar10", 13, (64, 4, 4)), ("mnist_mlp", 28, None),
])
def test_evaluation_outputs_equal_pytorchs_given_its_weights(name, size, flatten_chw):
    """Odd sides, where TensorFlow's SAME pooling in the CIFAR-10 network pads as torch does;
    ResNet-50 also at an even side, where its max pool leaves out the padding no window
    reads."""
    import torch

    from workloads import torch_models

    workload = WORKLOADS[name]
    torch_model = getattr(torch_models, name)(size, workload.classes).eval()
    with cached_initialisers(jax):
        flax_model = workload.builder(MODELS)(size, workload.classes)
    flax_model.eval()
    _copy_torch_weights(torch_model, flax_model, flatten_chw)
    images = np.random.default_rng(0).standard_normal((2, size, size, workload.channels),
                                                      dtype=np.float32)
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
    logits = np.asarray(flax_model(jnp.asarray(images)))
    assert np.abs(logits - expected).max() <= 1e-4 * np.abs(expected).max()


def test_the_jax_count_is_what_jaxs_own_gradient_computes():
    """The count adds each product's gradients by torch's rule; JAX's gradient jaxpr of the
    CIFAR-10 network (convolutions of stride 1 and SAME padding, so that every product's cost
    follows from its output) holds exactly those products: none for the images' gradient."""
    from scaling.workers.jax.flops import flops_per_image, jaxpr_flops

    workload = WORKLOADS["cifar10"]
    model = nnx.eval_shape(lambda: workload.builder(MODELS)(32, workload.classes))
    graph, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params, rest, images):
        return nnx.merge(graph, params, rest)(images).sum()

    images = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    gradient = jax.make_jaxpr(jax.value_and_grad(loss))(params, rest, images).jaxpr
    computed, _ = jaxpr_flops(gradient, [False] * len(gradient.invars), backward=False)
    count = flops_per_image(jax, nnx, graph, (params, rest), (32, 32, 3), "train")
    assert computed / 2 == count == 3 * flops_per_image(
        jax, nnx, graph, (params, rest), (32, 32, 3), "forward") - 2 * 32 * 32 * 64 * 5 * 5 * 3
