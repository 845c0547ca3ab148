"""Held-out workloads: in neither the bundled examples nor the data the shipped cost model
was trained on (the operator suite, resnet_block, mlp, bert_layer, resnet50_last_conv,
tools/pretrain_models.py; ResNet-50 and MobileNet-V2 are not in it either). Benchmarks
report the same ratios on them, so a gain that only holds on what we tuned for shows.

  python -m mlir_ansor.tune tools/heldout_models.py:vit_block
  python -m mlir_ansor.tune tools/heldout_models.py:gpt2_block
  python -m mlir_ansor.tune tools/heldout_models.py:mbconv_block
  python -m mlir_ansor.tune tools/heldout_models.py:efficientnet_b0 --search-minutes 8
"""
from __future__ import annotations

import torch
from torch import nn

from mlir_ansor.examples import calibrated


class VitBlock(nn.Module):
    """A ViT-S/16 encoder block: 197 tokens (196 patches + class), width 384, 6 heads,
    pre layer norm, GELU MLP of 1536."""

    def __init__(self, d: int = 384, heads: int = 6, mlp: int = 1536):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, mlp), nn.Linear(mlp, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, h, d // h).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class Gpt2Block(nn.Module):
    """A GPT-2 small block: 128 tokens, width 768, 12 heads, causal mask, tanh-GELU MLP."""

    def __init__(self, d: int = 768, heads: int = 12, seq: int = 128):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.heads
        q, k, v = self.attn(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.reshape(b, s, h, d // h).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // h) ** 0.5 + self.mask, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class MBConv(nn.Module):
    """An EfficientNet-B0 MBConv block: 1x1 expand (skipped at ratio 1), k x k depthwise,
    squeeze-and-excitation (a quarter of the block's input channels), 1x1 project; SiLU,
    batch norm; the input added back where the shape is kept. The defaults are stage 4's
    first block: 40 -> 80 channels at 28x28, stride 2."""

    def __init__(self, cin: int = 40, cout: int = 80, expand: int = 6, stride: int = 2,
                 kernel: int = 3):
        super().__init__()
        mid = cin * expand
        self.expand = (nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                     nn.SiLU()) if expand != 1 else nn.Identity())
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid,
                                          bias=False),
                                nn.BatchNorm2d(mid), nn.SiLU())
        squeeze = max(1, cin // 4)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, squeeze, 1),
                                nn.SiLU(), nn.Conv2d(squeeze, mid, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(self.expand(x))
        y = self.project(y * self.se(y))
        return x + y if self.residual else y


# EfficientNet-B0's stages: (expand ratio, output channels, blocks, first stride, kernel).
B0_STAGES = ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
             (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3))


class EfficientNetB0(nn.Module):
    """EfficientNet-B0 (Tan & Le, 2019) at 224x224 for inference: a 3x3 stride-2 stem of
    32 channels, the sixteen MBConv blocks of B0_STAGES, a 1x1 head of 1280, average
    pooling and a 1000-way classifier (no dropout: eval)."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers = [nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                                nn.SiLU())]
        cin = 32
        for expand, cout, blocks, stride, kernel in B0_STAGES:
            for i in range(blocks):
                layers.append(MBConv(cin, cout, expand, stride if i == 0 else 1, kernel))
                cin = cout
        layers.append(nn.Sequential(nn.Conv2d(cin, 1280, 1, bias=False),
                                    nn.BatchNorm2d(1280), nn.SiLU()))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(
            self.features(x), 1), 1))


def _seeded() -> None:
    torch.manual_seed(1)


def vit_block():
    _seeded()
    return VitBlock().eval(), (torch.randn(1, 197, 384),)


def gpt2_block():
    _seeded()
    return Gpt2Block().eval(), (torch.randn(1, 128, 768),)


def mbconv_block():
    _seeded()
    return MBConv().eval(), (torch.randn(1, 40, 28, 28),)


def efficientnet_b0():
    _seeded()
    model, inputs = EfficientNetB0(), (torch.randn(1, 3, 224, 224),)
    return calibrated(model, inputs), inputs


HELDOUT = {"vit_block": vit_block, "gpt2_block": gpt2_block, "mbconv_block": mbconv_block,
           "efficientnet_b0": efficientnet_b0}
