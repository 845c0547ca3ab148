"""Small models of kinds the bundled examples and the pre-training data do not have: each
exercises a different path of torch-mlir and IREE (a 7x7 depthwise conv with layer norm
over channels, pooling and nearest / bilinear upsampling with concatenation, 1-D convs,
an embedding lookup, torch's causal scaled_dot_product_attention, token-mixing linears over
a transpose, an argmax, grouped convs with squeeze-and-excitation, a strided 5x5 stem, a
stock nn.TransformerEncoderLayer, an LSTM, two outputs, einsum + cumsum, f16; and a second
batch: transposed, dilated and 3-D convs, a Llama-style block, a GRU, pixel shuffle, an
integer matmul, reflection padding with instance norm, top-k and sort, index_add on a
buffer, a batch-1 decode linear, a channel shuffle, hard-swish, a broadcast matmul, bf16).
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


# Second batch (thirty-second session): transposed, dilated and 3-D convs, a Llama-style
# block (RMSNorm, rotary embedding, SwiGLU), a GRU, pixel shuffle, integer matmul,
# reflection padding with instance norm, top-k and sort, scatter-add, a batch-1 decode
# linear, a ShuffleNet channel shuffle, hard-swish, a broadcast matmul, bf16.
class ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1)
        self.c = nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x):
        return self.c(F.relu(self.up(x)))


class DilatedGroupNorm(nn.Module):
    def __init__(self, c: int = 64):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=2, dilation=2)
        self.gn = nn.GroupNorm(8, c)
        self.c2 = nn.Conv2d(c, c, 3, padding=4, dilation=4)

    def forward(self, x):
        return self.c2(F.silu(self.gn(self.c1(x)))) + x


class Conv3dBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv3d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm3d(16)

    def forward(self, x):
        return F.avg_pool3d(F.relu(self.bn(self.c(x))), 2)


class RMSNorm(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d) * 1.1)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class LlamaBlock(nn.Module):
    def __init__(self, d: int = 128, h: int = 4, s: int = 64):
        super().__init__()
        self.h, self.hd = h, d // h
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(d, 344, bias=False), nn.Linear(d, 344, bias=False)
        self.w2 = nn.Linear(344, d, bias=False)
        freqs = 1.0 / 10000 ** (torch.arange(0, self.hd, 2).float() / self.hd)
        ang = torch.outer(torch.arange(s).float(), freqs)
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())

    def _rope(self, t):
        a, b = t[..., 0::2], t[..., 1::2]
        return torch.cat([a * self.cos - b * self.sin, a * self.sin + b * self.cos], -1)

    def forward(self, x):
        b, s, d = x.shape
        y = self.n1(x)
        q, k, v = ((w(y).reshape(b, s, self.h, self.hd).transpose(1, 2)) for w in
                   (self.wq, self.wk, self.wv))
        a = F.scaled_dot_product_attention(self._rope(q), self._rope(k), v)
        x = x + self.wo(a.transpose(1, 2).reshape(b, s, d))
        y = self.n2(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Gru(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(24, 48, batch_first=True)
        self.fc = nn.Linear(48, 5)

    def forward(self, x):
        return self.fc(self.gru(x)[0][:, -1])


class PixelShuffleSR(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 5, padding=2)
        self.c2 = nn.Conv2d(32, 3 * 9, 3, padding=1)
        self.ps = nn.PixelShuffle(3)

    def forward(self, x):
        return self.ps(self.c2(torch.tanh(self.c1(x))))


class IntMatmul(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.register_buffer("w", torch.randint(-8, 8, (96, 80), generator=g, dtype=torch.int32))

    def forward(self, x):
        return (x.to(torch.int32) @ self.w) // 4 + 1


class ReflectInstanceNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 16, 3)
        self.n = nn.InstanceNorm2d(16, affine=True)

    def forward(self, x):
        return F.relu(self.n(self.c(F.pad(x, (1, 1, 1, 1), mode="reflect")))) + x


class TopkSort(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 100)

    def forward(self, x):
        s = self.fc(x)
        vals, idx = s.topk(5, dim=-1)
        return vals.softmax(-1), torch.sort(s, dim=-1)[0][:, :3], idx


class ScatterAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.register_buffer("seg", torch.arange(64) % 7)

    def forward(self, x):
        h = F.relu(self.fc(x))
        out = torch.zeros(7, 16, dtype=h.dtype).index_add(0, self.seg, h)
        return out / 3.0


class DecodeLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(512, 2048), nn.Linear(2048, 512)

    def forward(self, x):
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class ShuffleUnit(nn.Module):
    def __init__(self, c: int = 116):
        super().__init__()
        h = c // 2
        self.pw1, self.b1 = nn.Conv2d(h, h, 1, bias=False), nn.BatchNorm2d(h)
        self.dw, self.b2 = nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h)
        self.pw2, self.b3 = nn.Conv2d(h, h, 1, bias=False), nn.BatchNorm2d(h)

    def forward(self, x):
        a, b = x.chunk(2, 1)
        b = F.relu(self.b3(self.pw2(self.b2(self.dw(F.relu(self.b1(self.pw1(b))))))))
        y = torch.cat([a, b], 1)
        n, c, hh, w = y.shape
        return y.reshape(n, 2, c // 2, hh, w).transpose(1, 2).reshape(n, c, hh, w)


class HardSwishSE(nn.Module):
    def __init__(self, c: int = 72):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 5, padding=2, groups=c)
        self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)
        self.pw = nn.Conv2d(c, 40, 1)

    def forward(self, x):
        y = F.hardswish(self.dw(x))
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(y, 1)))))
        return self.pw(y * s)


class BroadcastMatmul(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 64, 48) * 0.1)

    def forward(self, x):
        return torch.clamp(x @ self.w, -1.0, 1.0) + torch.erf(x[..., :48])


class Bf16MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(128, 256), nn.Linear(256, 64)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


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


def conv_transpose():
    _seeded()
    return ConvTranspose().eval(), (torch.randn(1, 32, 24, 24),)


def dilated_groupnorm():
    _seeded()
    return DilatedGroupNorm().eval(), (torch.randn(1, 64, 32, 32),)


def conv3d_block():
    _seeded()
    m = Conv3dBlock().eval()
    m.bn.running_mean.normal_(0, 0.1)
    m.bn.running_var.uniform_(0.5, 1.5)
    return m, (torch.randn(1, 8, 8, 24, 24),)


def llama_block():
    _seeded()
    return LlamaBlock().eval(), (torch.randn(1, 64, 128),)


def gru():
    _seeded()
    return Gru().eval(), (torch.randn(3, 12, 24),)


def pixel_shuffle_sr():
    _seeded()
    return PixelShuffleSR().eval(), (torch.randn(1, 3, 40, 40),)


def int_matmul():
    _seeded()
    return IntMatmul().eval(), (torch.randint(-20, 20, (64, 96), dtype=torch.int32),)


def reflect_instance_norm():
    _seeded()
    return ReflectInstanceNorm().eval(), (torch.randn(2, 16, 32, 32),)


def topk_sort():
    _seeded()
    return TopkSort().eval(), (torch.randn(8, 32),)


def scatter_add():
    _seeded()
    return ScatterAdd().eval(), (torch.randn(64, 16),)


def decode_linear():
    _seeded()
    return DecodeLinear().eval(), (torch.randn(1, 512),)


def shuffle_unit():
    _seeded()
    m = ShuffleUnit().eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.normal_(0, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    return m, (torch.randn(1, 116, 28, 28),)


def hardswish_se():
    _seeded()
    return HardSwishSE().eval(), (torch.randn(1, 72, 28, 28),)


def broadcast_matmul():
    _seeded()
    return BroadcastMatmul().eval(), (torch.randn(2, 3, 32, 64),)


def bf16_mlp():
    _seeded()
    return Bf16MLP().eval().bfloat16(), (torch.randn(32, 128).bfloat16(),)


UNSEEN = {f.__name__: f for f in (
    convnext_block, unet_like, audio_1d, text_classifier, sdpa_block, mixer_block,
    bilinear_up, argmax_head, seresnext_block, strided_stem, transformer_encoder, lstm,
    two_heads, einsum_cumsum, half_mlp,
    conv_transpose, dilated_groupnorm, conv3d_block, llama_block, gru, pixel_shuffle_sr,
    int_matmul, reflect_instance_norm, topk_sort, scatter_add, decode_linear, shuffle_unit,
    hardswish_se, broadcast_matmul, bf16_mlp)}
