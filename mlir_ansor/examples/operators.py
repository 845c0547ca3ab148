"""The operator suite of the Ansor paper (§7.1), as small PyTorch modules imported through
the normal frontend. Each operator has two realistic shapes: one at batch 1 and one at
batch 16 (NRM and TBS included); weights are random, nothing is downloaded.

C1D 1-D conv, C2D 2-D conv, C3D 3-D conv, GMM batched matmul, GRP grouped conv,
DIL dilated conv, DEP depthwise conv, T2D transposed conv, CAP capsule conv,
NRM matrix 2-norm; subgraphs ConvLayer (conv + batch norm + ReLU) and TBS
(two transposes + batch matmul + softmax).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


class BatchMatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


class CapsuleConv2d(nn.Module):
    """Capsule conv: every pixel holds `channels` 4x4 pose matrices; an output capsule sums
    pose @ weight over the window and the input capsules (NHWC + 4x4 layout)."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int):
        super().__init__()
        self.kernel, self.stride = kernel, stride
        self.weight = nn.Parameter(torch.randn(kernel * kernel, cin, cout, 4, 4) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s = self.kernel, self.stride
        h_out = (x.shape[1] - k) // s + 1
        w_out = (x.shape[2] - k) // s + 1
        rows = [x[:, i:i + s * (h_out - 1) + 1:s, j:j + s * (w_out - 1) + 1:s]
                for i in range(k) for j in range(k)]
        patches = torch.stack(rows, dim=3)  # n, h, w, window, cin, 4, 4
        return torch.einsum("nhwpcik,pcokj->nhwoij", patches, self.weight)


class MatrixNorm(nn.Module):
    """Frobenius (2-)norm of each matrix of a batch: small output, long reduction."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(torch.sum(x * x, dim=(-2, -1)))


class ConvLayer(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class TransposeBatchMatmulSoftmax(nn.Module):
    """Attention scores: q, k in (batch, seq, heads, dim) -> softmax(q k^T) per head."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        qt = q.transpose(1, 2)  # batch, heads, seq, dim
        kt = k.permute(0, 2, 3, 1)  # batch, heads, dim, seq
        return torch.softmax(torch.matmul(qt, kt), dim=-1)


@dataclass(frozen=True)
class Workload:
    name: str  # e.g. "C2D-b1"
    operator: str  # the suite's abbreviation
    make: Callable[[], nn.Module]
    inputs: Callable[[], tuple[torch.Tensor, ...]]

    def __call__(self) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(0)
        model = self.make().eval()
        return model, self.inputs()


def _r(*shape: int) -> Callable[[], tuple[torch.Tensor, ...]]:
    return lambda: (torch.randn(*shape),)


def _suite() -> list[Workload]:
    w = [
        Workload("C1D-b1", "C1D", lambda: nn.Conv1d(64, 128, 3, 2, 1, bias=False), _r(1, 64, 256)),
        Workload("C1D-b16", "C1D", lambda: nn.Conv1d(64, 64, 3, 1, 1, bias=False),
                 _r(16, 64, 128)),
        Workload("C2D-b1", "C2D", lambda: nn.Conv2d(64, 64, 3, 1, 1, bias=False),
                 _r(1, 64, 56, 56)),
        Workload("C2D-b16", "C2D", lambda: nn.Conv2d(128, 128, 3, 1, 1, bias=False),
                 _r(16, 128, 14, 14)),
        Workload("C3D-b1", "C3D", lambda: nn.Conv3d(32, 32, 3, 1, 1, bias=False),
                 _r(1, 32, 8, 28, 28)),
        Workload("C3D-b16", "C3D", lambda: nn.Conv3d(16, 32, 3, 1, 1, bias=False),
                 _r(16, 16, 4, 14, 14)),
        Workload("GMM-b1", "GMM", BatchMatMul, lambda: (torch.randn(1, 512, 512),
                                                        torch.randn(1, 512, 512))),
        Workload("GMM-b16", "GMM", BatchMatMul, lambda: (torch.randn(16, 128, 128),
                                                         torch.randn(16, 128, 128))),
        Workload("GRP-b1", "GRP", lambda: nn.Conv2d(64, 64, 3, 1, 1, groups=4, bias=False),
                 _r(1, 64, 56, 56)),
        Workload("GRP-b16", "GRP", lambda: nn.Conv2d(128, 128, 3, 1, 1, groups=8, bias=False),
                 _r(16, 128, 14, 14)),
        Workload("DIL-b1", "DIL", lambda: nn.Conv2d(64, 64, 3, 1, 2, dilation=2, bias=False),
                 _r(1, 64, 56, 56)),
        Workload("DIL-b16", "DIL", lambda: nn.Conv2d(128, 128, 3, 1, 2, dilation=2, bias=False),
                 _r(16, 128, 14, 14)),
        Workload("DEP-b1", "DEP", lambda: nn.Conv2d(32, 32, 3, 1, 1, groups=32, bias=False),
                 _r(1, 32, 112, 112)),
        Workload("DEP-b16", "DEP", lambda: nn.Conv2d(128, 128, 3, 1, 1, groups=128, bias=False),
                 _r(16, 128, 28, 28)),
        # MobileNet-V2's stride-2 depthwise conv: a strided window read.
        Workload("DEP-b1-s2", "DEP", lambda: nn.Conv2d(144, 144, 3, 2, 1, groups=144,
                                                       bias=False), _r(1, 144, 56, 56)),
        Workload("T2D-b1", "T2D", lambda: nn.ConvTranspose2d(256, 128, 4, 2, 1, bias=False),
                 _r(1, 256, 8, 8)),
        Workload("T2D-b16", "T2D", lambda: nn.ConvTranspose2d(128, 64, 4, 2, 1, bias=False),
                 _r(16, 128, 8, 8)),
        Workload("CAP-b1", "CAP", lambda: CapsuleConv2d(16, 16, 3, 2), _r(1, 16, 16, 16, 4, 4)),
        Workload("CAP-b16", "CAP", lambda: CapsuleConv2d(8, 8, 3, 1), _r(16, 8, 8, 8, 4, 4)),
        Workload("NRM-b1", "NRM", MatrixNorm, _r(1, 512, 512)),
        Workload("NRM-b16", "NRM", MatrixNorm, _r(16, 256, 256)),
        Workload("ConvLayer-b1", "ConvLayer", lambda: ConvLayer(64, 64), _r(1, 64, 56, 56)),
        Workload("ConvLayer-b16", "ConvLayer", lambda: ConvLayer(128, 128), _r(16, 128, 14, 14)),
        Workload("TBS-b1", "TBS", TransposeBatchMatmulSoftmax,
                 lambda: (torch.randn(1, 128, 12, 64), torch.randn(1, 128, 12, 64))),
        Workload("TBS-b16", "TBS", TransposeBatchMatmulSoftmax,
                 lambda: (torch.randn(16, 64, 8, 64), torch.randn(16, 64, 8, 64))),
    ]
    return w


SUITE: dict[str, Workload] = {w.name: w for w in _suite()}
OPERATORS: tuple[str, ...] = tuple(dict.fromkeys(w.operator for w in SUITE.values()))
