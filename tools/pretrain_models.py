"""Extra workloads for the shipped cost model's training corpus: shapes that are in none
of the bundled examples and none of the held-out models (tools/heldout_models.py), so
those stay unseen by the model.

  python -m mlir_ansor.tune tools/pretrain_models.py:pointwise ... --policy random
"""
from __future__ import annotations

import torch
from torch import nn


def _bn_relu(c: int) -> list[nn.Module]:
    return [nn.BatchNorm2d(c), nn.ReLU()]


def pointwise():
    """Two 1x1 convolutions (an expand/project pair, Inception-like sizes) with BN and ReLU:
    the channels-last contraction of most convnets' time, at shapes no bundled model has."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(384, 96, 1, bias=False), *_bn_relu(96),
                      nn.Conv2d(96, 576, 1, bias=False), *_bn_relu(576)).eval()
    return m, (torch.randn(1, 384, 17, 17),)
