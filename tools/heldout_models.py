"""Held-out workloads: in neither the bundled examples nor the data the shipped cost model
was trained on (the operator suite, resnet_block, mlp, bert_layer, resnet50_last_conv,
tools/pretrain_models.py; ResNet-50 and MobileNet-V2 are not in it either). Benchmarks
report the same ratios on them, so a gain that only holds on what we tuned for shows.

  python -m mlir_ansor.tune tools/heldout_models.py:vit_block
  python -m mlir_ansor.tune tools/heldout_models.py:gpt2_block
  python -m mlir_ansor.tune tools/heldout_models.py:mbconv_block
"""
from __future__ import annotations

import torch
from torch import nn


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
    """An EfficientNet-B0 MBConv block (stage 4: 40 -> 80 channels at 28x28, stride 2):
    1x1 expand x6, 3x3 depthwise, squeeze-and-excitation, 1x1 project; SiLU, batch norm."""

    def __init__(self, cin: int = 40, cout: int = 80, expand: int = 6, stride: int = 2):
        super().__init__()
        mid = cin * expand
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                    nn.SiLU())
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                                nn.BatchNorm2d(mid), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, cin // 4, 1),
                                nn.SiLU(), nn.Conv2d(cin // 4, mid, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(self.expand(x))
        return self.project(y * self.se(y))


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


HELDOUT = {"vit_block": vit_block, "gpt2_block": gpt2_block, "mbconv_block": mbconv_block}
