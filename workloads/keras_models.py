"""Keras (TensorFlow backend) definitions of the registry's workloads, NHWC, random weights.

Inception-v3 comes from keras.applications. AlexNet, GoogLeNet, ResNet-50 and the CIFAR-10
network are written with Keras layers to match the PyTorch definitions layer for layer (ResNet-50
is torchvision's v1.5, with the stride on each bottleneck's 3x3 convolution; keras.applications'
ResNet50 puts it on the first 1x1 and gives its convolutions biases).
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers


def inception_v3(image_size: int, classes: int) -> keras.Model:
    return keras.applications.InceptionV3(weights=None, input_shape=(image_size, image_size, 3),
                                          classes=classes, classifier_activation=None)


class AdaptiveAveragePooling(layers.Layer):
    """torch's AdaptiveAvgPool2d(side): output cell i averages input rows
    floor(i * n / side) to ceil((i + 1) * n / side), and likewise for columns."""

    def __init__(self, side: int, **kwargs):
        super().__init__(**kwargs)
        self.side = side

    def _pool(self, x, axis: int):
        n = x.shape[axis]
        cells = []
        for i in range(self.side):
            begin, end = (i * n) // self.side, -((-(i + 1) * n) // self.side)
            window = tf.gather(x, list(range(begin, end)), axis=axis)
            cells.append(tf.reduce_mean(window, axis=axis, keepdims=True))
        return tf.concat(cells, axis=axis)

    def call(self, x):
        return self._pool(self._pool(x, 1), 2)


def alexnet(image_size: int, classes: int) -> keras.Model:
    """torchvision's AlexNet: padding written out so every feature map has torch's size."""
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.ZeroPadding2D(2)(inputs)
    x = layers.Conv2D(64, 11, strides=4, activation="relu")(x)
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = layers.Conv2D(192, 5, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = layers.Conv2D(384, 3, padding="same", activation="relu")(x)
    x = layers.Conv2D(256, 3, padding="same", activation="relu")(x)
    x = layers.Conv2D(256, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(3, strides=2)(x)
    if x.shape[1] != 6 or x.shape[2] != 6:
        x = AdaptiveAveragePooling(6)(x)
    x = layers.Flatten()(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    x = layers.Dense(4096, activation="relu")(x)
    outputs = layers.Dense(classes)(x)
    return keras.Model(inputs, outputs, name="alexnet")


def _conv_bn(x, filters: int, kernel: int, strides: int = 1, padding: str = "same"):
    """torchvision's BasicConv2d: convolution without bias, batch norm (eps 0.001), ReLU."""
    x = layers.Conv2D(filters, kernel, strides=strides, padding=padding, use_bias=False)(x)
    x = layers.BatchNormalization(epsilon=0.001)(x)
    return layers.ReLU()(x)


def _inception(x, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
    """GoogLeNet's inception block; the "5x5" branch uses a 3x3 kernel, as torchvision does."""
    branch1 = _conv_bn(x, ch1x1, 1)
    branch2 = _conv_bn(_conv_bn(x, ch3x3red, 1), ch3x3, 3)
    branch3 = _conv_bn(_conv_bn(x, ch5x5red, 1), ch5x5, 3)
    branch4 = _conv_bn(layers.MaxPooling2D(3, strides=1, padding="same")(x), pool_proj, 1)
    return layers.Concatenate()([branch1, branch2, branch3, branch4])


def _ceil_max_pool(x, window: int):
    """torch's MaxPool2d(window, stride=2, ceil_mode=True): the last window may overhang the
    bottom and right edges. The zero padding follows a ReLU, so it is torch's minus infinity
    (SAME padding would give a larger map at odd sides)."""
    pads = [-(-(n - window) // 2) * 2 + window - n for n in x.shape[1:3]]
    if any(pads):
        x = layers.ZeroPadding2D(((0, pads[0]), (0, pads[1])))(x)
    return layers.MaxPooling2D(window, strides=2)(x)


def googlenet(image_size: int, classes: int) -> keras.Model:
    """torchvision's GoogLeNet without auxiliary heads."""
    inputs = keras.Input((image_size, image_size, 3))
    x = _conv_bn(layers.ZeroPadding2D(3)(inputs), 64, 7, strides=2, padding="valid")
    x = _ceil_max_pool(x, 3)
    x = _conv_bn(x, 64, 1)
    x = _conv_bn(x, 192, 3)
    x = _ceil_max_pool(x, 3)
    x = _inception(x, 64, 96, 128, 16, 32, 32)
    x = _inception(x, 128, 128, 192, 32, 96, 64)
    x = _ceil_max_pool(x, 3)
    x = _inception(x, 192, 96, 208, 16, 48, 64)
    x = _inception(x, 160, 112, 224, 24, 64, 64)
    x = _inception(x, 128, 128, 256, 24, 64, 64)
    x = _inception(x, 112, 144, 288, 32, 64, 64)
    x = _inception(x, 256, 160, 320, 32, 128, 128)
    x = _ceil_max_pool(x, 2)
    x = _inception(x, 256, 160, 320, 32, 128, 128)
    x = _inception(x, 384, 192, 384, 48, 128, 128)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.2)(x)
    outputs = layers.Dense(classes)(x)
    return keras.Model(inputs, outputs, name="googlenet")


def _resnet_conv_bn(x, filters: int, kernel: int, strides: int = 1, relu: bool = True):
    """A ResNet convolution without bias, with torch's padding of kernel // 2 on every side
    (SAME padding at stride 2 would pad only the bottom and right), batch norm with torch's
    epsilon and, unless ``relu`` is false, ReLU."""
    if kernel > 1:
        x = layers.ZeroPadding2D(kernel // 2)(x)
    x = layers.Conv2D(filters, kernel, strides=strides, use_bias=False)(x)
    x = layers.BatchNormalization(epsilon=1e-5)(x)
    return layers.ReLU()(x) if relu else x


def _bottleneck(x, width: int, strides: int):
    """torchvision's bottleneck: 1x1, 3x3 (carrying the stride), 1x1 to 4 x width, and a
    projection shortcut where the shape changes."""
    residual = _resnet_conv_bn(x, width, 1)
    residual = _resnet_conv_bn(residual, width, 3, strides)
    residual = _resnet_conv_bn(residual, 4 * width, 1, relu=False)
    if strides != 1 or x.shape[-1] != 4 * width:
        x = _resnet_conv_bn(x, 4 * width, 1, strides, relu=False)
    return layers.ReLU()(layers.Add()([residual, x]))


def resnet50(image_size: int, classes: int) -> keras.Model:
    """torchvision's ResNet-50 (v1.5); the max-pool's zero padding follows a ReLU, so it is
    torch's padding with minus infinity."""
    inputs = keras.Input((image_size, image_size, 3))
    x = _resnet_conv_bn(inputs, 64, 7, strides=2)
    x = layers.MaxPooling2D(3, strides=2)(layers.ZeroPadding2D(1)(x))
    for width, blocks, strides in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            x = _bottleneck(x, width, strides if i == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(classes)(x), name="resnet50")


class LocalResponseNorm(layers.Layer):
    """The tutorial's LRN: depth_radius 4, bias 1, alpha 0.001/9, beta 0.75."""

    def call(self, x):
        return tf.nn.local_response_normalization(x, depth_radius=4, bias=1.0,
                                                  alpha=0.001 / 9.0, beta=0.75)


def cifar10(image_size: int, classes: int) -> keras.Model:
    """The TensorFlow CIFAR-10 tutorial network."""
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.Conv2D(64, 5, padding="same", activation="relu")(inputs)
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    x = LocalResponseNorm()(x)
    x = layers.Conv2D(64, 5, padding="same", activation="relu")(x)
    x = LocalResponseNorm()(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(384, activation="relu")(x)
    x = layers.Dense(192, activation="relu")(x)
    outputs = layers.Dense(classes)(x)
    return keras.Model(inputs, outputs, name="cifar10")


def mnist_mlp(image_size: int, classes: int) -> keras.Model:
    """Flatten, three dense-1000 + ReLU + dropout 0.2, dense-``classes``; one input channel."""
    inputs = keras.Input((image_size, image_size, 1))
    x = layers.Flatten()(inputs)
    for _ in range(3):
        x = layers.Dropout(0.2)(layers.Dense(1000, activation="relu")(x))
    return keras.Model(inputs, layers.Dense(classes)(x), name="mnist_mlp")
