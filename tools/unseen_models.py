"""Small models of kinds the bundled examples and the pre-training data do not have: each
exercises a different path of torch-mlir and IREE (a 7x7 depthwise conv with layer norm
over channels, pooling and nearest / bilinear upsampling with concatenation, 1-D convs,
an embedding lookup, torch's causal scaled_dot_product_attention, token-mixing linears over
a transpose, an argmax, grouped convs with squeeze-and-excitation, a strided 5x5 stem, a
stock nn.TransformerEncoderLayer, an LSTM, two outputs, einsum + cumsum, f16; and a second
batch: transposed, dilated and 3-D convs, a Llama-style block, a GRU, pixel shuffle, an
integer matmul, reflection padding with instance norm, top-k and sort, index_add on a
buffer, a batch-1 decode linear, a channel shuffle, hard-swish, a broadcast matmul, bf16;
and a third: shifted-window attention, WaveNet's dilated causal convs, cross entropy,
masked_fill by lengths, cosine similarity, adaptive and ceil-mode pooling, fake
quantization, unbind/stack/cumprod, grid_sample, bicubic, a depthwise-separable 1-D block;
and a fourth: a key-padding-masked nn.MultiheadAttention, unfold, gather, activations,
var/std, local response norm, flip/triu, circular padding, a channel multiplier,
logsumexp, max with indices, pixel_unshuffle, baddbmm).
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


# Third batch (thirty-second session): shifted-window attention with a gathered relative
# bias, dilated causal 1-D convs (WaveNet), cross entropy, masked_fill by lengths, cosine
# similarity, adaptive pools, ceil-mode pooling, fake quantization, unbind/stack/cumprod,
# grid_sample, bicubic upsampling, a depthwise-separable 1-D block.
class WindowAttention(nn.Module):
    """Swin-style: shifted windows (roll), attention inside 4x4 windows with a learned
    relative bias gathered by an index buffer."""
    def __init__(self, d=32, h=2, w=4):
        super().__init__()
        self.h, self.w = h, w
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.table = nn.Parameter(torch.randn((2 * w - 1) ** 2, h) * 0.1)
        c = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")).flatten(1)
        rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + (w - 1)
        self.register_buffer("idx", rel[..., 0] * (2 * w - 1) + rel[..., 1])

    def forward(self, x):
        b, H, W, d = x.shape
        w = self.w
        x = torch.roll(x, (-2, -2), (1, 2))
        t = x.reshape(b, H // w, w, W // w, w, d).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, d)
        q, k, v = self.qkv(t).reshape(t.shape[0], w * w, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-1, -2)) * (d // self.h) ** -0.5
        a = a + self.table[self.idx].permute(2, 0, 1)
        y = (a.softmax(-1) @ v).transpose(1, 2).reshape(t.shape[0], w * w, d)
        return self.proj(y)


class Wavenet(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.f = nn.ModuleList(nn.Conv1d(c, 2 * c, 2, dilation=d) for d in (1, 2, 4))
        self.o = nn.ModuleList(nn.Conv1d(c, c, 1) for _ in range(3))

    def forward(self, x):
        for f, o in zip(self.f, self.o):
            y = f(F.pad(x, (f.dilation[0], 0)))
            a, g = y.chunk(2, 1)
            x = x + o(torch.tanh(a) * torch.sigmoid(g))
        return x


class CrossEntropyHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 50)

    def forward(self, x, target):
        return F.cross_entropy(self.fc(x), target, reduction="none")


class MaskedFill(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x, lengths):
        s = self.fc(x) @ x.transpose(1, 2)
        pos = torch.arange(x.shape[1])
        mask = pos[None, None, :] >= lengths[:, None, None]
        return s.masked_fill(mask, float("-inf")).softmax(-1)


class NormalizeCosine(nn.Module):
    def __init__(self):
        super().__init__()
        self.proto = nn.Parameter(torch.randn(20, 48))

    def forward(self, x):
        return F.normalize(x, dim=-1) @ F.normalize(self.proto, dim=-1).t() * 10.0


class AdaptivePool(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.c(x))
        return torch.cat([F.adaptive_avg_pool2d(y, 7).flatten(1),
                          F.adaptive_max_pool2d(y, 3).flatten(1)], 1)


class CeilPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(8, 24, 3)

    def forward(self, x):
        return F.max_pool2d(F.relu(self.c(x)), 3, 2, ceil_mode=True)


class FakeQuant(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        s = x.abs().amax(-1, keepdim=True) / 127.0
        q = torch.clamp(torch.round(x / s), -128, 127)
        return self.fc(q * s)


class StackUnbind(nn.Module):
    def __init__(self):
        super().__init__()
        self.ws = nn.Parameter(torch.randn(3, 24, 24) * 0.2)

    def forward(self, x):
        parts = x.unbind(1)
        ys = [p @ w for p, w in zip(parts, self.ws)]
        return torch.stack(ys, 1).cumprod(-1).clamp(-5, 5)


class GridSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor([[0.9, 0.1, 0.05], [-0.1, 0.9, 0.0]]))

    def forward(self, x):
        grid = F.affine_grid(self.theta[None].expand(x.shape[0], 2, 3), x.shape, align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)


class Bicubic(nn.Module):
    def forward(self, x):
        return F.interpolate(x, size=(45, 45), mode="bicubic", align_corners=False)


class DepthwiseSeparable1d(nn.Module):
    def __init__(self, c=64):
        super().__init__()
        self.dw = nn.Conv1d(c, c, 9, padding=4, groups=c)
        self.pw = nn.Conv1d(c, 128, 1)
        self.ln = nn.LayerNorm(128)

    def forward(self, x):
        return self.ln(F.gelu(self.pw(self.dw(x))).transpose(1, 2))


# Fourth batch (thirty-second session): key-padding-masked nn.MultiheadAttention, unfold
# patches, gather along a dim, an activation zoo, var/std, local response norm, flip and
# triu/tril, circular padding, a depthwise conv with a channel multiplier, logsumexp,
# max with indices and a scalar mean, pixel_unshuffle, baddbmm.
class MhaPaddingMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, x, pad):
        return self.mha(x, x, x, key_padding_mask=pad, need_weights=False)[0]


class UnfoldPatch(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 4 * 4, 32)

    def forward(self, x):
        return self.fc(F.unfold(x, 4, stride=4).transpose(1, 2))


class GatherDim(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 40)

    def forward(self, x, idx):
        return torch.gather(self.fc(x), 1, idx) * 2


class ActivationZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 96)
        self.prelu = nn.PReLU(48)

    def forward(self, x):
        y = F.glu(self.fc(x), -1)
        return self.prelu(y) + F.elu(y) + F.softplus(y) + F.mish(y) + F.hardtanh(y)


class VarStd(nn.Module):
    def forward(self, x):
        return (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5) + x.var(-1, keepdim=True)


class LRN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 24, 5, stride=2)
        self.n = nn.LocalResponseNorm(5)

    def forward(self, x):
        return self.n(F.relu(self.c(x)))


class FlipTriu(nn.Module):
    def forward(self, x):
        return torch.triu(x @ x.flip(-1).transpose(-1, -2), 1) + torch.tril(x[..., :x.shape[-2]])


class CircularConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(8, 8, 3, padding=1, padding_mode="circular")

    def forward(self, x):
        return self.c(x)


class DepthwiseMultiplier(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(16, 32, 3, padding=1, groups=16)

    def forward(self, x):
        return F.relu6(self.c(x))


class LogSumExp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 100)

    def forward(self, x):
        y = self.fc(x)
        return F.log_softmax(y, -1) - torch.logsumexp(y, -1, keepdim=True)


class MaxWithIndices(nn.Module):
    def forward(self, x):
        v, i = torch.max(x, dim=1)
        return v, i, x.mean()


class PixelUnshuffle(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(12, 16, 1)

    def forward(self, x):
        return self.c(F.pixel_unshuffle(x, 2))


class Baddbmm(nn.Module):
    def __init__(self):
        super().__init__()
        self.b = nn.Parameter(torch.randn(4, 24, 20) * 0.1)

    def forward(self, x, y):
        return torch.baddbmm(self.b, x, y, beta=0.5, alpha=2.0)


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


def window_attention():
    _seeded()
    return WindowAttention().eval(), (torch.randn(2, 8, 8, 32),)


def wavenet():
    _seeded()
    return Wavenet().eval(), (torch.randn(2, 32, 256),)


def cross_entropy():
    _seeded()
    return CrossEntropyHead().eval(), (torch.randn(16, 64), torch.randint(0, 49, (16,)))


def masked_fill():
    _seeded()
    return MaskedFill().eval(), (torch.randn(3, 20, 32), torch.tensor([20, 7, 13]))


def normalize_cosine():
    _seeded()
    return NormalizeCosine().eval(), (torch.randn(12, 48),)


def adaptive_pool():
    _seeded()
    return AdaptivePool().eval(), (torch.randn(2, 16, 20, 20),)


def ceil_pool():
    _seeded()
    return CeilPool().eval(), (torch.randn(1, 8, 34, 34),)


def fake_quant():
    _seeded()
    return FakeQuant().eval(), (torch.randn(16, 64),)


def stack_unbind():
    _seeded()
    return StackUnbind().eval(), (torch.randn(4, 3, 24) * 0.5,)


def grid_sample():
    _seeded()
    return GridSample().eval(), (torch.randn(2, 4, 16, 16),)


def bicubic():
    _seeded()
    return Bicubic().eval(), (torch.randn(1, 3, 30, 30),)


def depthwise_1d():
    _seeded()
    return DepthwiseSeparable1d().eval(), (torch.randn(2, 64, 100),)

def mha_padding_mask():
    _seeded()
    pad = torch.zeros(2, 24, dtype=torch.bool)
    pad[1, 17:] = True
    return MhaPaddingMask().eval(), (torch.randn(2, 24, 64), pad)


def unfold_patch():
    _seeded()
    return UnfoldPatch().eval(), (torch.randn(2, 3, 32, 32),)


def gather_dim():
    _seeded()
    return GatherDim().eval(), (torch.randn(8, 16), torch.randint(0, 39, (8, 12)))


def activation_zoo():
    _seeded()
    return ActivationZoo().eval(), (torch.randn(32, 48),)


def var_std():
    _seeded()
    return VarStd().eval(), (torch.randn(16, 64, 8),)


def lrn():
    _seeded()
    return LRN().eval(), (torch.randn(1, 3, 63, 63),)


def flip_triu():
    _seeded()
    return FlipTriu().eval(), (torch.randn(4, 20, 24),)


def circular_conv():
    _seeded()
    return CircularConv().eval(), (torch.randn(2, 8, 20, 20),)


def depthwise_multiplier():
    _seeded()
    return DepthwiseMultiplier().eval(), (torch.randn(1, 16, 28, 28),)


def logsumexp():
    _seeded()
    return LogSumExp().eval(), (torch.randn(16, 32),)


def max_with_indices():
    _seeded()
    return MaxWithIndices().eval(), (torch.randn(12, 37, 5),)


def pixel_unshuffle():
    _seeded()
    return PixelUnshuffle().eval(), (torch.randn(1, 3, 32, 32),)


def baddbmm():
    _seeded()
    return Baddbmm().eval(), (torch.randn(4, 24, 16), torch.randn(4, 16, 20))


UNSEEN = {f.__name__: f for f in (
    convnext_block, unet_like, audio_1d, text_classifier, sdpa_block, mixer_block,
    bilinear_up, argmax_head, seresnext_block, strided_stem, transformer_encoder, lstm,
    two_heads, einsum_cumsum, half_mlp,
    conv_transpose, dilated_groupnorm, conv3d_block, llama_block, gru, pixel_shuffle_sr,
    int_matmul, reflect_instance_norm, topk_sort, scatter_add, decode_linear, shuffle_unit,
    hardswish_se, broadcast_matmul, bf16_mlp,
    window_attention, wavenet, cross_entropy, masked_fill, normalize_cosine, adaptive_pool,
    ceil_pool, fake_quant, stack_unbind, grid_sample, bicubic, depthwise_1d,
    mha_padding_mask, unfold_patch, gather_dim, activation_zoo, var_std, lrn, flip_triu,
    circular_conv, depthwise_multiplier, logsumexp, max_with_indices, pixel_unshuffle,
    baddbmm)}
