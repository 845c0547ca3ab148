"""Bundled example models (random weights, nothing downloaded). Each factory returns
(model in eval mode, tuple of example inputs)."""
from __future__ import annotations

import torch
from torch import nn

from mlir_ansor.examples.operators import SUITE, ConvLayer


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


class Bottleneck(nn.Module):
    """ResNet-50 bottleneck: 1x1 reduce, 3x3 (strided), 1x1 expand, each with BN."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class ResNet50(nn.Module):
    """ResNet-50 (v1.5: stride in the 3x3 conv), written out so nothing is downloaded."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for b in range(blocks):
                layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
                cin = width * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                   nn.BatchNorm2d(hidden), nn.ReLU6(),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                   nn.ReLU6()]
        cin = 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.fc(torch.flatten(y, 1))


class BertLayer(nn.Module):
    """One BERT-base encoder layer: self-attention (12 heads) + FFN, post layer norm."""

    def __init__(self, d: int = 768, heads: int = 12, ffn: int = 3072):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ffn)
        self.ff2 = nn.Linear(ffn, d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, h, d // h).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5, dim=-1)
        ctx = (att @ v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


def _seeded() -> None:
    torch.manual_seed(0)


def calibrated(model: nn.Module, inputs: tuple) -> nn.Module:
    """`model` in eval mode with its batch norms' running statistics set to those of one
    pass over `inputs`, as a trained network's are: with the fresh statistics (mean 0,
    variance 1) MobileNet-V2's activations shrank about 10x a block, to 1e-7 by its last
    convs, so its outputs were the classifier's bias and an end-to-end check against torch
    checked nothing else. The pass runs with momentum None (a plain average), so that one
    batch sets the statistics."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(*inputs)
    return model.eval()


def resnet_block():
    _seeded()
    return BasicBlock().eval(), (torch.randn(1, 64, 56, 56),)


def resnet50_last_conv():
    """The last 3x3 convolution of ResNet-50 (512 channels, 7x7), with its BN and ReLU."""
    _seeded()
    return ConvLayer(512, 512).eval(), (torch.randn(1, 512, 7, 7),)


def matmul_1024():
    _seeded()
    return MatMul().eval(), (torch.randn(1024, 1024), torch.randn(1024, 1024))


def mlp():
    _seeded()
    return MLP().eval(), (torch.randn(128, 512),)


def resnet50():
    _seeded()
    return ResNet50().eval(), (torch.randn(1, 3, 224, 224),)


def mobilenet_v2():
    _seeded()
    model, inputs = MobileNetV2(), (torch.randn(1, 3, 224, 224),)
    return calibrated(model, inputs), inputs


def bert_layer():
    """A BERT-base encoder layer, batch 1, sequence 128."""
    _seeded()
    return BertLayer().eval(), (torch.randn(1, 128, 768),)


EXAMPLES = {"resnet_block": resnet_block, "matmul_1024": matmul_1024, "mlp": mlp,
            "resnet50_last_conv": resnet50_last_conv, "resnet50": resnet50,
            "mobilenet_v2": mobilenet_v2, "bert_layer": bert_layer}

EXAMPLES.update(SUITE)
