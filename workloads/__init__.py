"""The workload registry: one entry per model, with a builder per framework.

Each framework's builders live in one module, named by the framework's registry entry
(``Framework.models``), as functions named after the workloads, so that this registry can be
imported without importing any framework, and names no framework. Auxiliary classifier
heads (GoogLeNet, Inception-v3) are off in every framework: the published
throughput tables measure the main network only.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from scaling.errors import ScalingError
from scaling.registry import Registry


class UnknownWorkload(ScalingError, ValueError):
    """A workload name that the registry does not know."""


@dataclass(frozen=True)
class Workload:
    """What a workload is: its nominal input, its classes and how to build it."""

    name: str
    input_size: int
    """Nominal square input side in pixels (224 for ImageNet networks, 299 for Inception-v3)."""
    classes: int
    min_image_size: int
    """The smallest input side the network accepts in every framework."""
    notes: str = ""
    """Differences between the frameworks' definitions, where there are any."""
    channels: int = 3
    """Channels of the synthetic input images."""
    optimizer: str = "sgd"
    """``sgd`` (learning rate 0.01, momentum 0.9) or ``adam`` (learning rate 0.001)."""

    def builder(self, models: str) -> Callable:
        """The function of the framework's model module ``models`` (its registry entry names
        it, such as ``workloads.torch_models``) that builds this workload from (image_size,
        classes)."""
        return getattr(importlib.import_module(models), self.name)


WORKLOADS: Registry[Workload] = Registry("workload", UnknownWorkload)


def register(workload: Workload) -> Workload:
    return WORKLOADS.register(workload.name, workload)


get_workload = WORKLOADS.get


register(Workload(
    name="alexnet", input_size=224, classes=1000, min_image_size=63,
    notes="torchvision's single-tower AlexNet (61.1 M parameters).",
))
register(Workload(
    name="googlenet", input_size=224, classes=1000, min_image_size=32,
    notes="GoogLeNet (Inception v1) with batch norm, as torchvision builds it; no auxiliary heads.",
))
register(Workload(
    name="resnet50", input_size=224, classes=1000, min_image_size=32,
    notes=("torchvision's v1.5 in every framework: the stride on each bottleneck's 3x3 "
           "convolution (keras.applications' ResNet50 and gluon's resnet50_v1 are v1)."),
))
register(Workload(
    name="inception_v3", input_size=299, classes=1000, min_image_size=75,
    notes="No auxiliary head. keras.applications' version has 0.07% fewer parameters.",
))
register(Workload(
    name="cifar10", input_size=32, classes=10, min_image_size=8,
    notes=(
        "The TensorFlow CIFAR-10 tutorial network: conv5x5-64, max-pool, LRN, conv5x5-64, LRN, "
        "max-pool, fc-384, fc-192, fc-10 (1.76 M parameters at 32x32)."
    ),
))
register(Workload(
    name="mnist_mlp", input_size=28, classes=10, min_image_size=1, channels=1, optimizer="adam",
    notes=("The MNIST multilayer perceptron of the CPU-versus-GPU reference: flatten, three "
           "dense-1000 + ReLU + dropout 0.2, dense-10, Adam (2,797,010 parameters at 28x28)."),
))
