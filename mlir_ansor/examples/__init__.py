"""Bundled example models (random weights, nothing downloaded). Each factory returns
(model in eval mode, tuple of example inputs)."""
from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN + identity, ReLU."""

    def __init__(self, channels: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class ConvBnRelu(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class MatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


class MLP(nn.Module):
    def __init__(self, d: int = 512, hidden: int = 1024):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _seeded() -> None:
    torch.manual_seed(0)


def resnet_block():
    _seeded()
    return BasicBlock().eval(), (torch.randn(1, 64, 56, 56),)


def resnet50_last_conv():
    """The last 3x3 convolution of ResNet-50 (512 channels, 7x7), with its BN and ReLU."""
    _seeded()
    return ConvBnRelu(512).eval(), (torch.randn(1, 512, 7, 7),)


def matmul_1024():
    _seeded()
    return MatMul().eval(), (torch.randn(1024, 1024), torch.randn(1024, 1024))


def mlp():
    _seeded()
    return MLP().eval(), (torch.randn(128, 512),)


EXAMPLES = {"resnet_block": resnet_block, "matmul_1024": matmul_1024, "mlp": mlp,
            "resnet50_last_conv": resnet50_last_conv}
