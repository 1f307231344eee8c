"""PyTorch definitions of the registry's workloads (random initialisation, no pretrained weights).

torchvision is imported by the workloads it builds only: its import loads torch's compiler
(``torch._dynamo``, about two seconds on a CPU core), which a cell of the networks defined
here, under ``single``, never needs."""

from __future__ import annotations

import torch
from torch import nn


def alexnet(image_size: int, classes: int) -> nn.Module:
    from torchvision import models
    return models.alexnet(weights=None, num_classes=classes)


def googlenet(image_size: int, classes: int) -> nn.Module:
    from torchvision import models
    return models.googlenet(weights=None, num_classes=classes, aux_logits=False, init_weights=True)


def resnet50(image_size: int, classes: int) -> nn.Module:
    from torchvision import models
    return models.resnet50(weights=None, num_classes=classes)


def inception_v3(image_size: int, classes: int) -> nn.Module:
    from torchvision import models
    return models.inception_v3(
        weights=None, num_classes=classes, aux_logits=False, init_weights=True
    )


def _same_pool_size(size: int) -> int:
    """Output side of a 3x3, stride-2 max-pool with TensorFlow's SAME padding."""
    return (size + 1) // 2


class Cifar10Net(nn.Module):
    """The TensorFlow CIFAR-10 tutorial network, layer for layer.

    TensorFlow's LRN uses depth_radius=4, bias=1, alpha=0.001/9, beta=0.75 and does not divide
    alpha by the window; PyTorch does, so the window is 9 and alpha is 0.001.
    """

    def __init__(self, image_size: int = 32, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
            nn.LocalResponseNorm(size=9, alpha=0.001, beta=0.75, k=1.0),
            nn.Conv2d(64, 64, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.LocalResponseNorm(size=9, alpha=0.001, beta=0.75, k=1.0),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        side = _same_pool_size(_same_pool_size(image_size))
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * side * side, 384),
            nn.ReLU(inplace=True),
            nn.Linear(384, 192),
            nn.ReLU(inplace=True),
            nn.Linear(192, classes),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(images))


def cifar10(image_size: int, classes: int) -> nn.Module:
    return Cifar10Net(image_size, classes)


def mnist_mlp(image_size: int, classes: int) -> nn.Module:
    """Flatten, three dense-1000 + ReLU + dropout 0.2, dense-``classes``; one input channel."""
    layers, width = [nn.Flatten()], image_size * image_size
    for _ in range(3):
        layers += [nn.Linear(width, 1000), nn.ReLU(), nn.Dropout(0.2)]
        width = 1000
    return nn.Sequential(*layers, nn.Linear(width, classes))
