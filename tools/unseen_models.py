"""Small models of kinds the bundled examples and the pre-training data do not have: each
exercises a different path of torch-mlir and IREE (a 7x7 depthwise conv with layer norm
over channels, pooling and nearest / bilinear upsampling with concatenation, 1-D convs,
an embedding lookup, torch's causal scaled_dot_product_attention, token-mixing linears over
a transpose, an argmax, grouped convs with squeeze-and-excitation, a strided 5x5 stem, a
stock nn.TransformerEncoderLayer, an LSTM, two outputs, einsum + cumsum, f16).
`tools/sweep_models.py` tunes each with a small budget and prints where it stands; a run
that fails, or a task whose every candidate fails, shows there.

  python tools/sweep_models.py                      # all of them, 24 trials each
  python -m mlir_ansor.tune tools/unseen_models.py:convnext_block
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvNeXtBlock(nn.Module):
    def __init__(self, d: int = 96):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.ln = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.full((d,), 0.1))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.ln(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class UNetLike(nn.Module):
    def __init__(self, c: int = 16):
        super().__init__()
        self.e1 = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU())
        self.e2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU())
        self.d1 = nn.Sequential(nn.Conv2d(3 * c, c, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(F.max_pool2d(a, 2))
        u = F.interpolate(b, scale_factor=2, mode="nearest")
        return self.out(self.d1(torch.cat([a, u], 1)))


class Audio1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(40, 128, 5, padding=2), nn.BatchNorm1d(128), nn.ReLU(),
            nn.Conv1d(128, 128, 3, padding=1, stride=2), nn.BatchNorm1d(128), nn.ReLU(),
            nn.AvgPool1d(2))
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(self.net(x).mean(-1))


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 128)
        self.fc1, self.fc2 = nn.Linear(128, 256), nn.Linear(256, 4)

    def forward(self, ids):
        return self.fc2(torch.tanh(self.fc1(self.emb(ids).mean(1))))


class SdpaBlock(nn.Module):
    def __init__(self, d: int = 256, h: int = 4):
        super().__init__()
        self.h = h
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, -1)
        q, k, v = (t.reshape(b, s, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


class MixerBlock(nn.Module):
    def __init__(self, tokens: int = 64, d: int = 128):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.tok = nn.Sequential(nn.Linear(tokens, 256), nn.GELU(), nn.Linear(256, tokens))
        self.ch = nn.Sequential(nn.Linear(d, 512), nn.GELU(), nn.Linear(512, d))

    def forward(self, x):
        x = x + self.tok(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.ln2(x))


class BilinearUp(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.c(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))


class ArgmaxHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 37)

    def forward(self, x):
        return self.fc(x).argmax(-1)


class SEResNeXtBlock(nn.Module):
    def __init__(self, c: int = 128):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, groups=32, bias=False)
        self.b2 = nn.BatchNorm2d(c)
        self.c3, self.b3 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.fc1, self.fc2 = nn.Linear(c, c // 16), nn.Linear(c // 16, c)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)))
        y = self.b3(self.c3(y))
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(y.mean((2, 3))))))
        return F.relu(x + y * s[:, :, None, None])


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 64, 5, stride=2, padding=2)
        self.c2 = nn.Conv2d(64, 96, 3, padding=1)

    def forward(self, x):
        return self.c2(F.max_pool2d(F.relu(self.c(x)), 3, 2, 1))


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(32, 64, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(96, 128)
        self.a, self.b = nn.Linear(128, 10), nn.Linear(128, 3)

    def forward(self, x):
        h = F.silu(self.body(x))
        return self.a(h), torch.softmax(self.b(h), dim=0)


class EinsumCumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 37, 53) * 0.1)

    def forward(self, x):
        return torch.einsum("bhi,hij->bhj", x, self.w).cumsum(-1)


class HalfMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(128, 256), nn.Linear(256, 64)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def _seeded() -> None:
    torch.manual_seed(3)


def convnext_block():
    _seeded()
    return ConvNeXtBlock().eval(), (torch.randn(1, 96, 28, 28),)


def unet_like():
    _seeded()
    return UNetLike().eval(), (torch.randn(1, 3, 64, 64),)


def audio_1d():
    _seeded()
    m = Audio1d().eval()
    for mod in m.modules():  # running statistics other than the identity
        if isinstance(mod, nn.BatchNorm1d):
            mod.running_mean.normal_(0, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    return m, (torch.randn(4, 40, 200),)


def text_classifier():
    _seeded()
    return TextClassifier().eval(), (torch.randint(0, 1000, (8, 32)),)


def sdpa_block():
    _seeded()
    return SdpaBlock().eval(), (torch.randn(1, 128, 256),)


def mixer_block():
    _seeded()
    return MixerBlock().eval(), (torch.randn(2, 64, 128),)


def bilinear_up():
    _seeded()
    return BilinearUp().eval(), (torch.randn(1, 8, 32, 32),)


def argmax_head():
    _seeded()
    return ArgmaxHead().eval(), (torch.randn(197, 64),)


def seresnext_block():
    _seeded()
    return SEResNeXtBlock().eval(), (torch.randn(2, 128, 14, 14),)


def strided_stem():
    _seeded()
    return Stem().eval(), (torch.randn(1, 3, 96, 96),)


def transformer_encoder():
    _seeded()
    layer = nn.TransformerEncoderLayer(128, 4, 256, dropout=0.0, batch_first=True)
    return layer.eval(), (torch.randn(1, 48, 128),)


def lstm():
    _seeded()
    return Lstm().eval(), (torch.randn(2, 16, 32),)


def two_heads():
    _seeded()
    return TwoHeads().eval(), (torch.randn(16, 96),)


def einsum_cumsum():
    _seeded()
    return EinsumCumsum().eval(), (torch.randn(4, 8, 37),)


def half_mlp():
    _seeded()
    return HalfMLP().eval().half(), (torch.randn(64, 128).half(),)


UNSEEN = {f.__name__: f for f in (
    convnext_block, unet_like, audio_1d, text_classifier, sdpa_block, mixer_block,
    bilinear_up, argmax_head, seresnext_block, strided_stem, transformer_encoder, lstm,
    two_heads, einsum_cumsum, half_mlp)}
