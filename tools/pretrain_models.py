"""Extra workloads for the shipped cost model's training corpus: shapes that are in none
of the bundled examples and none of the held-out models (tools/heldout_models.py), so
those stay unseen by the model.

  python -m mlir_ansor.tune tools/pretrain_models.py:pointwise ... --policy random
  python -m mlir_ansor.tune tools/pretrain_models.py:gemms --data-tiling off \
      --trials 450 --policy random --cost-model none --batch 8 --out OUT
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


class _MatMuls(nn.Module):
    def forward(self, *pairs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(a @ b for a, b in zip(pairs[::2], pairs[1::2]))


def gemms():
    """Large f32 matmuls (M x K x N: 512x2048x768, 2048x512x1536, 768x768x3072), a
    transformer MLP's and projection's sizes: the corpus had no matmul with a reduction
    over 768 or an output over 1M elements, where blocking the reduction and packing the
    panel decide the speed. None is square, none is the 1024^3 of the search curves.
    In the shipped AVX-512 model since the tasks are balanced in its loss
    (`CostModelConfig.task_balance`; docs/results.md)."""
    torch.manual_seed(0)
    shapes = ((512, 2048, 768), (2048, 512, 1536), (768, 768, 3072))
    inputs = []
    for m, k, n in shapes:
        inputs += [torch.randn(m, k), torch.randn(k, n)]
    return _MatMuls().eval(), tuple(inputs)
