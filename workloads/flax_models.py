"""Flax NNX definitions of the registry's workloads (NHWC, random initialisation).

Every network matches its PyTorch definition (``workloads.torch_models``) layer for layer: the
same parameter count, the same feature-map sizes at every input size torch accepts, and the same
outputs given torch's weights. They are torchvision's AlexNet (with its adaptive 6x6 average
pool), GoogLeNet (batch norm, ceil-mode pools, no auxiliary heads), ResNet-50 (v1.5: the stride
on the 3x3 convolution) and Inception-v3 (no auxiliary head), the TensorFlow CIFAR-10 tutorial
network and the MNIST MLP. Each builder takes (image_size, classes) and returns a module in
training mode; ``model.eval()`` switches BatchNorm to its running statistics and turns Dropout
off. Batch statistics are per device.

Differences from the torch definitions, none of which changes a shape or the arithmetic cost:

- Weights start from Flax's default initialisers (LeCun-normal kernels, zero biases), not
  torch's.
- The first dense layer after a flatten sees its features in (height, width, channel) order
  rather than torch's (channel, height, width): a permutation of the same weights.
- BatchNorm's running variance averages the biased batch variance; torch's, the unbiased one.
- The CIFAR-10 network pools with TensorFlow's SAME padding, as the tutorial (and
  ``keras_models``) does: torch's symmetric padding of 1 gives the same sizes, with the windows
  one pixel apart at even sides. Its LRN is TensorFlow's, which torch's window of 9 and alpha of
  0.001 reproduce.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx


def _conv(rngs, cin, cout, kernel, stride=1, padding=0, bias=True) -> nnx.Conv:
    """A convolution with torch's arguments: a square kernel for an int, padding on both sides."""
    kernel = (kernel, kernel) if isinstance(kernel, int) else kernel
    return nnx.Conv(cin, cout, kernel, strides=stride, padding=padding, use_bias=bias, rngs=rngs)


def _conv_bn(rngs, cin, cout, kernel, stride=1, padding=0, epsilon=1e-3, relu=True):
    """Convolution without bias, batch norm and, unless ``relu`` is false, ReLU. Epsilon 0.001
    is torchvision's BasicConv2d's (GoogLeNet, Inception-v3); ResNet has torch's default."""
    layers = [_conv(rngs, cin, cout, kernel, stride, padding, bias=False),
              nnx.BatchNorm(cout, momentum=0.9, epsilon=epsilon, rngs=rngs)]
    return nnx.Sequential(*layers, nnx.relu) if relu else nnx.Sequential(*layers)


def _max_pool(window, stride, padding="VALID"):
    return functools.partial(nnx.max_pool, window_shape=(window, window),
                             strides=(stride, stride), padding=padding)


def _torch_max_pool(window, stride, padding):
    """torch's MaxPool2d(window, stride, padding) with the padding that its windows read: all
    of it before each side, after it only as far as the last window reaches (none at ResNet's
    even sides, where torch's last row and column of padding are never read). The outputs are
    torch's; the padded map and the buffer its gradient scatters into are no larger than the
    windows need."""

    def pool(x):
        pads = []
        for n in x.shape[1:3]:
            last = (n + 2 * padding - window) // stride * stride
            pads.append((padding, max(0, last + window - n - padding)))
        return nnx.max_pool(x, (window, window), (stride, stride), pads)

    return pool


def _ceil_max_pool(window):
    """torch's MaxPool2d(window, stride=2, ceil_mode=True): the last window may overhang the
    bottom and right edges."""

    def pool(x):
        pads = [(0, -(-(n - window) // 2) * 2 + window - n) for n in x.shape[1:3]]
        return nnx.max_pool(x, (window, window), (2, 2), pads)

    return pool


def _avg_pool_3x3(x):
    """torch's avg_pool2d(kernel_size=3, stride=1, padding=1): the zero padding is counted."""
    return nnx.avg_pool(x, (3, 3), padding=((1, 1), (1, 1)), count_include_pad=True)


def _adaptive_avg_pool(x, side=6):
    """torch's AdaptiveAvgPool2d(side): output cell i averages input rows floor(i n / side) to
    ceil((i + 1) n / side), and likewise for columns."""
    for axis in (1, 2):
        n = x.shape[axis]
        if n != side:
            x = jnp.concatenate([
                jax.lax.slice_in_dim(x, i * n // side, -(-(i + 1) * n // side), axis=axis)
                .mean(axis, keepdims=True) for i in range(side)], axis)
    return x


def _global_avg_pool(x):
    return x.mean(axis=(1, 2))


def _flatten(x):
    return x.reshape(x.shape[0], -1)


class Concat(nnx.Module):
    """Branches applied to the same input, their outputs concatenated along the channels."""

    def __init__(self, *branches):
        self.branches = nnx.List(branches)

    def __call__(self, x):
        return jnp.concatenate([branch(x) for branch in self.branches], axis=-1)


def alexnet(image_size: int, classes: int) -> nnx.Module:
    """torchvision's AlexNet; the adaptive pool is the identity at 224x224."""
    rngs = nnx.Rngs(params=0, dropout=1)
    conv = functools.partial(_conv, rngs)
    return nnx.Sequential(
        conv(3, 64, 11, stride=4, padding=2), nnx.relu, _max_pool(3, 2),
        conv(64, 192, 5, padding=2), nnx.relu, _max_pool(3, 2),
        conv(192, 384, 3, padding=1), nnx.relu,
        conv(384, 256, 3, padding=1), nnx.relu,
        conv(256, 256, 3, padding=1), nnx.relu, _max_pool(3, 2),
        _adaptive_avg_pool, _flatten,
        nnx.Dropout(0.5, rngs=rngs), nnx.Linear(256 * 6 * 6, 4096, rngs=rngs), nnx.relu,
        nnx.Dropout(0.5, rngs=rngs), nnx.Linear(4096, 4096, rngs=rngs), nnx.relu,
        nnx.Linear(4096, classes, rngs=rngs),
    )


def _inception(rngs, cin, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj) -> Concat:
    """GoogLeNet's inception block; the "5x5" branch uses a 3x3 kernel, as torchvision does."""
    conv = functools.partial(_conv_bn, rngs)
    return Concat(
        conv(cin, ch1x1, 1),
        nnx.Sequential(conv(cin, ch3x3red, 1), conv(ch3x3red, ch3x3, 3, padding=1)),
        nnx.Sequential(conv(cin, ch5x5red, 1), conv(ch5x5red, ch5x5, 3, padding=1)),
        nnx.Sequential(_max_pool(3, 1, ((1, 1), (1, 1))), conv(cin, pool_proj, 1)),
    )


def googlenet(image_size: int, classes: int) -> nnx.Module:
    """torchvision's GoogLeNet without auxiliary heads."""
    rngs = nnx.Rngs(params=0, dropout=1)
    conv, block = functools.partial(_conv_bn, rngs), functools.partial(_inception, rngs)
    return nnx.Sequential(
        conv(3, 64, 7, stride=2, padding=3), _ceil_max_pool(3),
        conv(64, 64, 1), conv(64, 192, 3, padding=1), _ceil_max_pool(3),
        block(192, 64, 96, 128, 16, 32, 32), block(256, 128, 128, 192, 32, 96, 64),
        _ceil_max_pool(3),
        block(480, 192, 96, 208, 16, 48, 64), block(512, 160, 112, 224, 24, 64, 64),
        block(512, 128, 128, 256, 24, 64, 64), block(512, 112, 144, 288, 32, 64, 64),
        block(528, 256, 160, 320, 32, 128, 128), _ceil_max_pool(2),
        block(832, 256, 160, 320, 32, 128, 128), block(832, 384, 192, 384, 48, 128, 128),
        _global_avg_pool, nnx.Dropout(0.2, rngs=rngs), nnx.Linear(1024, classes, rngs=rngs),
    )


class Bottleneck(nnx.Module):
    """torchvision's ResNet bottleneck: 1x1, 3x3 (carrying the stride), 1x1 to 4 x width, and a
    projection shortcut where the shape changes."""

    def __init__(self, rngs, cin: int, width: int, stride: int):
        conv = functools.partial(_conv_bn, rngs, epsilon=1e-5)
        self.residual = nnx.Sequential(
            conv(cin, width, 1), conv(width, width, 3, stride, padding=1),
            conv(width, 4 * width, 1, relu=False))
        self.shortcut = (conv(cin, 4 * width, 1, stride, relu=False)
                         if stride != 1 or cin != 4 * width else None)

    def __call__(self, x):
        shortcut = x if self.shortcut is None else self.shortcut(x)
        return nnx.relu(self.residual(x) + shortcut)


def resnet50(image_size: int, classes: int) -> nnx.Module:
    rngs = nnx.Rngs(0)
    layers = [_conv_bn(rngs, 3, 64, 7, 2, padding=3, epsilon=1e-5), _torch_max_pool(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(rngs, cin, width, stride if i == 0 else 1))
            cin = 4 * width
    return nnx.Sequential(*layers, _global_avg_pool, nnx.Linear(cin, classes, rngs=rngs))


def _inception_a(conv, cin, pool_features) -> Concat:
    return Concat(
        conv(cin, 64, 1),
        nnx.Sequential(conv(cin, 48, 1), conv(48, 64, 5, padding=2)),
        nnx.Sequential(conv(cin, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, padding=1)),
        nnx.Sequential(_avg_pool_3x3, conv(cin, pool_features, 1)),
    )


def _inception_b(conv, cin) -> Concat:
    return Concat(
        conv(cin, 384, 3, stride=2),
        nnx.Sequential(conv(cin, 64, 1), conv(64, 96, 3, padding=1), conv(96, 96, 3, stride=2)),
        _max_pool(3, 2),
    )


def _inception_c(conv, cin, c7) -> Concat:
    return Concat(
        conv(cin, 192, 1),
        nnx.Sequential(conv(cin, c7, 1), conv(c7, c7, (1, 7), padding=(0, 3)),
                       conv(c7, 192, (7, 1), padding=(3, 0))),
        nnx.Sequential(conv(cin, c7, 1), conv(c7, c7, (7, 1), padding=(3, 0)),
                       conv(c7, c7, (1, 7), padding=(0, 3)), conv(c7, c7, (7, 1), padding=(3, 0)),
                       conv(c7, 192, (1, 7), padding=(0, 3))),
        nnx.Sequential(_avg_pool_3x3, conv(cin, 192, 1)),
    )


def _inception_d(conv, cin) -> Concat:
    return Concat(
        nnx.Sequential(conv(cin, 192, 1), conv(192, 320, 3, stride=2)),
        nnx.Sequential(conv(cin, 192, 1), conv(192, 192, (1, 7), padding=(0, 3)),
                       conv(192, 192, (7, 1), padding=(3, 0)), conv(192, 192, 3, stride=2)),
        _max_pool(3, 2),
    )


def _inception_e(conv, cin) -> Concat:
    def split():
        return Concat(conv(384, 384, (1, 3), padding=(0, 1)),
                      conv(384, 384, (3, 1), padding=(1, 0)))

    return Concat(
        conv(cin, 320, 1),
        nnx.Sequential(conv(cin, 384, 1), split()),
        nnx.Sequential(conv(cin, 448, 1), conv(448, 384, 3, padding=1), split()),
        nnx.Sequential(_avg_pool_3x3, conv(cin, 192, 1)),
    )


def inception_v3(image_size: int, classes: int) -> nnx.Module:
    """torchvision's Inception-v3 without its auxiliary head."""
    rngs = nnx.Rngs(params=0, dropout=1)
    conv = functools.partial(_conv_bn, rngs)
    return nnx.Sequential(
        conv(3, 32, 3, stride=2), conv(32, 32, 3), conv(32, 64, 3, padding=1), _max_pool(3, 2),
        conv(64, 80, 1), conv(80, 192, 3), _max_pool(3, 2),
        _inception_a(conv, 192, 32), _inception_a(conv, 256, 64), _inception_a(conv, 288, 64),
        _inception_b(conv, 288),
        _inception_c(conv, 768, 128), _inception_c(conv, 768, 160),
        _inception_c(conv, 768, 160), _inception_c(conv, 768, 192),
        _inception_d(conv, 768), _inception_e(conv, 1280), _inception_e(conv, 2048),
        _global_avg_pool, nnx.Dropout(0.5, rngs=rngs), nnx.Linear(2048, classes, rngs=rngs),
    )


def local_response_norm(x):
    """TensorFlow's tf.nn.local_response_normalization(depth_radius=4, bias=1,
    alpha=0.001 / 9, beta=0.75): each channel divided by (1 + alpha x the sum of the squares of
    the 9 channels around it) ** beta."""
    squares = jax.lax.reduce_window(x * x, 0.0, jax.lax.add, (1, 1, 1, 9), (1, 1, 1, 1),
                                    ((0, 0), (0, 0), (0, 0), (4, 4)))
    return x / (1.0 + 0.001 / 9 * squares) ** 0.75


def cifar10(image_size: int, classes: int) -> nnx.Module:
    """The TensorFlow CIFAR-10 tutorial network: conv5x5-64, max-pool, LRN, conv5x5-64, LRN,
    max-pool, fc-384, fc-192, fc-``classes``."""
    rngs = nnx.Rngs(0)
    side = (image_size + 1) // 2
    side = (side + 1) // 2
    return nnx.Sequential(
        _conv(rngs, 3, 64, 5, padding=2), nnx.relu, _max_pool(3, 2, "SAME"), local_response_norm,
        _conv(rngs, 64, 64, 5, padding=2), nnx.relu, local_response_norm, _max_pool(3, 2, "SAME"),
        _flatten, nnx.Linear(64 * side * side, 384, rngs=rngs), nnx.relu,
        nnx.Linear(384, 192, rngs=rngs), nnx.relu, nnx.Linear(192, classes, rngs=rngs),
    )


def mnist_mlp(image_size: int, classes: int) -> nnx.Module:
    """Flatten, three dense-1000 + ReLU + dropout 0.2, dense-``classes``; one input channel."""
    rngs = nnx.Rngs(params=0, dropout=1)
    layers, width = [_flatten], image_size * image_size
    for _ in range(3):
        layers += [nnx.Linear(width, 1000, rngs=rngs), nnx.relu, nnx.Dropout(0.2, rngs=rngs)]
        width = 1000
    return nnx.Sequential(*layers, nnx.Linear(width, classes, rngs=rngs))
