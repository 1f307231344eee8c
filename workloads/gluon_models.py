"""MXNet Gluon definitions of the registry's workloads (NCHW, random initialisation).

AlexNet and Inception-v3 come from gluon.model_zoo.vision, adjusted only so that inputs below
the nominal size work as they do in PyTorch: AlexNet gets torch's adaptive 6x6 average pool
before its classifier, and Inception-v3's final 8x8 average pool becomes a global one (the same
operation at 299x299). ResNet-50 is the model zoo's ResNetV1 network with torchvision's
bottleneck (v1.5: the stride on the 3x3 convolution; the zoo's ``resnet50_v1`` puts it on the
first 1x1). GoogLeNet and the CIFAR-10 network are HybridBlocks that match the PyTorch
definitions layer for layer.
"""

from __future__ import annotations

import functools

from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision
from mxnet.gluon.model_zoo.vision.resnet import ResNetV1, resnet_spec


class AdaptiveAveragePool(nn.HybridBlock):
    def __init__(self, side: int, **kwargs):
        super().__init__(**kwargs)
        self.side = side

    def hybrid_forward(self, F, x):
        return F.contrib.AdaptiveAvgPooling2D(x, output_size=self.side)


def _rebuild(blocks) -> nn.HybridSequential:
    sequence = nn.HybridSequential()
    for block in blocks:
        sequence.add(block)
    return sequence


def alexnet(image_size: int, classes: int):
    net = vision.alexnet(classes=classes)
    blocks = list(net.features)
    flatten = next(i for i, block in enumerate(blocks) if isinstance(block, nn.Flatten))
    net.features = _rebuild(blocks[:flatten] + [AdaptiveAveragePool(6)] + blocks[flatten:])
    return net


class Bottleneck(nn.HybridBlock):
    """torchvision's ResNet bottleneck, with the model zoo's block arguments: 1x1, 3x3 (carrying
    the stride), 1x1 to ``channels``, each convolution without bias and followed by batch norm,
    and a projection shortcut where ``downsample``."""

    def __init__(self, channels, stride, downsample=False, in_channels=0, **kwargs):
        super().__init__(**kwargs)
        width, conv = channels // 4, functools.partial(_conv_bn, epsilon=1e-5)
        self.body = _rebuild([conv(width, 1), conv(width, 3, stride, 1),
                              conv(channels, 1, relu=False)])
        self.downsample = conv(channels, 1, stride, relu=False) if downsample else None

    def hybrid_forward(self, F, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.Activation(self.body(x) + shortcut, act_type="relu")


def resnet50(image_size: int, classes: int):
    """torchvision's ResNet-50 (v1.5)."""
    _, layers, channels = resnet_spec[50]
    return ResNetV1(Bottleneck, layers, channels, classes=classes)


def inception_v3(image_size: int, classes: int):
    net = vision.inception_v3(classes=classes)
    net.features = _rebuild(nn.GlobalAvgPool2D() if isinstance(block, nn.AvgPool2D)
                            and block._kwargs.get("kernel") == (8, 8) else block
                            for block in net.features)
    return net


def _conv_bn(channels: int, kernel: int, strides: int = 1, padding: int = 0,
             epsilon: float = 1e-3, relu: bool = True):
    """Convolution without bias, batch norm and, unless ``relu`` is false, ReLU. Epsilon 0.001
    is torchvision's BasicConv2d's (GoogLeNet); ResNet has torch's default."""
    block = nn.HybridSequential()
    block.add(nn.Conv2D(channels, kernel, strides=strides, padding=padding, use_bias=False),
              nn.BatchNorm(epsilon=epsilon))
    if relu:
        block.add(nn.Activation("relu"))
    return block


class Inception(nn.HybridBlock):
    """GoogLeNet's inception block; the "5x5" branch uses a 3x3 kernel, as torchvision does."""

    def __init__(self, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj, **kwargs):
        super().__init__(**kwargs)
        self.branch1 = _conv_bn(ch1x1, 1)
        self.branch2 = _rebuild([_conv_bn(ch3x3red, 1), _conv_bn(ch3x3, 3, padding=1)])
        self.branch3 = _rebuild([_conv_bn(ch5x5red, 1), _conv_bn(ch5x5, 3, padding=1)])
        self.branch4 = _rebuild([nn.MaxPool2D(3, strides=1, padding=1, ceil_mode=True),
                                 _conv_bn(pool_proj, 1)])

    def hybrid_forward(self, F, x):
        return F.concat(self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x),
                        dim=1)


def googlenet(image_size: int, classes: int):
    """torchvision's GoogLeNet without auxiliary heads."""
    net = nn.HybridSequential()
    net.add(
        _conv_bn(64, 7, strides=2, padding=3), nn.MaxPool2D(3, strides=2, ceil_mode=True),
        _conv_bn(64, 1), _conv_bn(192, 3, padding=1), nn.MaxPool2D(3, strides=2, ceil_mode=True),
        Inception(64, 96, 128, 16, 32, 32), Inception(128, 128, 192, 32, 96, 64),
        nn.MaxPool2D(3, strides=2, ceil_mode=True),
        Inception(192, 96, 208, 16, 48, 64), Inception(160, 112, 224, 24, 64, 64),
        Inception(128, 128, 256, 24, 64, 64), Inception(112, 144, 288, 32, 64, 64),
        Inception(256, 160, 320, 32, 128, 128), nn.MaxPool2D(2, strides=2, ceil_mode=True),
        Inception(256, 160, 320, 32, 128, 128), Inception(384, 192, 384, 48, 128, 128),
        nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dropout(0.2), nn.Dense(classes),
    )
    return net


class LocalResponseNorm(nn.HybridBlock):
    """MXNet's LRN divides alpha by the window, as PyTorch does: window 9, alpha 0.001."""

    def hybrid_forward(self, F, x):
        return F.LRN(x, alpha=0.001, beta=0.75, knorm=1.0, nsize=9)


def cifar10(image_size: int, classes: int):
    """The TensorFlow CIFAR-10 tutorial network."""
    net = nn.HybridSequential()
    net.add(
        nn.Conv2D(64, 5, padding=2, activation="relu"), nn.MaxPool2D(3, strides=2, padding=1),
        LocalResponseNorm(),
        nn.Conv2D(64, 5, padding=2, activation="relu"), LocalResponseNorm(),
        nn.MaxPool2D(3, strides=2, padding=1),
        nn.Flatten(), nn.Dense(384, activation="relu"), nn.Dense(192, activation="relu"),
        nn.Dense(classes),
    )
    return net


def mnist_mlp(image_size: int, classes: int):
    """Flatten (dense layers flatten their input), three dense-1000 + ReLU + dropout 0.2,
    dense-``classes``."""
    net = nn.HybridSequential()
    for _ in range(3):
        net.add(nn.Dense(1000, activation="relu"), nn.Dropout(0.2))
    net.add(nn.Dense(classes))
    return net
