"""Model families beyond the image classifiers of ``zoo.py``, against ONNX Runtime.

    python bench/families.py [--models vocoder,logmel,...] [--threads 1,2] [--calls 20]

Each model is written here in PyTorch from its family's published layer list (random
weights, seed 0: the weights do not change a float32 op's time; the outputs are still
compared with ORT's), exported at opset 17 and cached under ``~/.cache/monolib/families``:

* ``vocoder``: a HiFi-GAN-style generator (80 mel bins x 50 frames; ConvTranspose1d
  upsampling by 8, 8, 2, 2 with kernel 2s, residual dilated 3-tap Conv1d, LeakyRelu).
* ``logmel``: ``torch.stft`` (400-point Hann frames every 160 samples of 1 s at 16 kHz)
  then power, a mel matrix and Log: ONNX ``STFT`` on a ``[B, L]`` signal.
* ``wav2vec``: a wav2vec 2.0-style feature encoder (7 strided Conv1d of 512 channels,
  GroupNorm, GELU) and its grouped positional conv (768 channels, 128 taps, 16 groups).
* ``conformer``: 4 Conformer-style blocks (subsampling convs, attention, GLU, a 31-tap
  depthwise Conv1d, BatchNorm, SiLU feed-forward).
* ``convnext``: a ConvNeXt-style net (7x7 depthwise convs, LayerNorm over channels,
  GELU MLPs) at 224x224.
* ``vit``: a ViT-Tiny-style encoder (16x16 patches, 12 pre-norm layers of width 192).
* ``bert``: a MiniLM-style encoder (6 layers, width 384, 12 heads, 128 tokens).
* ``segformer``: a SegFormer-B0-style segmenter at 512x512 (overlapping patch embeds,
  attention on K/V reduced by strided convs, Mix-FFN: Linear, 3x3 depthwise conv,
  Transpose + GELU, Linear; an all-MLP decoder with bilinear Resize).
* ``deeplab``: a DeepLabV3-style segmenter at 512x512 (MobileNetV2 body at output stride
  8 with dilated depthwise convs; ASPP: 3x3 convs at dilations 6, 12 and 18).
* ``ultraface``: an UltraFace-slim-style face detector at 240x320 (depthwise + 1x1
  blocks from a 120x160 map down, three 3x3 heads). Still 1.08x ORT (1.3x at 2
  threads): in the model its depthwise convs at 120x160 and 60x80 (16-32 channels) run
  1.2-1.9x ORT's NCHWc kernels (0.83-0.87x their times before they read their rows in
  place, ``conv_depthwise.h``), its 16 -> 32 1x1 conv at 120x160 1.35x.
* ``regnetx``: a RegNetX-400MF-style classifier at 224x224 (stages of 32, 64, 160 and
  400 channels, 1, 2, 7 and 12 blocks: 1x1, a 3x3 in groups of 16 channels, 1x1).

Timing as ``zoo.py``'s (blocks of ``--calls`` calls of each side in turn). Needs
PyTorch, which neither the install nor CI brings: a probe for a contributor, not a
target table. The vocoder and the log-mel front end were found this way (1.04x / 1.60x
and a compile error before their fixes: ``passes/tconv_subpixel.py``'s 1-D form,
``conv_ocv.h``'s column segments, ``ops/math/dft.py``'s STFT as a GEMM), and so were
SegFormer (1.02x / 1.12x: its Transpose + GELU ran per element, ``ops/tensor/transpose.py``)
and DeepLab's dilated convs (``conv_ocv.h``'s edge runs), and RegNetX's grouped convs
(1.22x / 1.19x: a 7-wide row has no room for a tile, ``conv_ocv.h``'s flat bands).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from zoo import table

DEFAULT = ("vocoder,logmel,wav2vec,conformer,convnext,vit,bert,segformer,deeplab,ultraface,"
           "regnetx")

#: Inputs per model: name -> (input name, shape, dtype).
INPUTS = {
    "vocoder": ("x", (1, 80, 50), np.float32),
    "logmel": ("x", (1, 16000), np.float32),
    "wav2vec": ("x", (1, 1, 16000), np.float32),
    "conformer": ("x", (1, 1, 400, 80), np.float32),
    "convnext": ("x", (1, 3, 224, 224), np.float32),
    "vit": ("x", (1, 3, 224, 224), np.float32),
    "bert": ("ids", (1, 128), np.int64),
    "segformer": ("x", (1, 3, 512, 512), np.float32),
    "deeplab": ("x", (1, 3, 512, 512), np.float32),
    "ultraface": ("x", (1, 3, 240, 320), np.float32),
    "regnetx": ("x", (1, 3, 224, 224), np.float32),
}


def _modules():
    """The PyTorch modules, by name (imported here: only this probe needs torch)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Vocoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = nn.Conv1d(80, 256, 7, padding=3)
            self.ups, self.res = nn.ModuleList(), nn.ModuleList()
            c = 256
            for r in (8, 8, 2, 2):
                self.ups.append(nn.ConvTranspose1d(c, c // 2, 2 * r, r, r // 2))
                c //= 2
                self.res.append(nn.ModuleList(
                    nn.Conv1d(c, c, 3, dilation=d, padding=d) for d in (1, 3, 5)))
            self.post = nn.Conv1d(c, 1, 7, padding=3)

        def forward(self, x):
            x = self.pre(x)
            for up, res in zip(self.ups, self.res):
                x = up(F.leaky_relu(x, 0.1))
                for conv in res:
                    x = x + conv(F.leaky_relu(x, 0.1))
            return torch.tanh(self.post(F.leaky_relu(x)))

    class LogMel(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("window", torch.hann_window(400))
            self.register_buffer("mel", torch.rand(201, 80))

        def forward(self, x):
            spec = torch.stft(x, 400, 160, window=self.window, center=False,
                              return_complex=False)
            power = spec.pow(2).sum(-1).transpose(1, 2)
            return torch.log(torch.clamp(power @ self.mel, min=1e-10))

    class Wav2Vec(nn.Module):
        def __init__(self):
            super().__init__()
            taps = [(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2
            self.convs = nn.ModuleList(nn.Conv1d(1 if i == 0 else 512, 512, k, s, bias=False)
                                       for i, (k, s) in enumerate(taps))
            self.norm = nn.GroupNorm(512, 512)
            self.ln, self.proj = nn.LayerNorm(512), nn.Linear(512, 768)
            self.pos = nn.Conv1d(768, 768, 128, padding=64, groups=16)

        def forward(self, x):
            for i, conv in enumerate(self.convs):
                x = conv(x)
                x = F.gelu(self.norm(x) if i == 0 else x)
            x = self.proj(self.ln(x.transpose(1, 2)))
            return x + F.gelu(self.pos(x.transpose(1, 2))[:, :, :-1]).transpose(1, 2)

    class Conformer(nn.Module):
        def __init__(self, d=144, blocks=4):
            super().__init__()
            self.sub = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2),
                                     nn.ReLU())
            self.lin = nn.Linear(d * 19, d)
            self.att = nn.ModuleList(nn.MultiheadAttention(d, 4, batch_first=True)
                                     for _ in range(blocks))
            self.ln = nn.ModuleList(nn.LayerNorm(d) for _ in range(2 * blocks))
            self.pw1 = nn.ModuleList(nn.Conv1d(d, 2 * d, 1) for _ in range(blocks))
            self.dw = nn.ModuleList(nn.Conv1d(d, d, 31, padding=15, groups=d)
                                    for _ in range(blocks))
            self.bn = nn.ModuleList(nn.BatchNorm1d(d) for _ in range(blocks))
            self.pw2 = nn.ModuleList(nn.Conv1d(d, d, 1) for _ in range(blocks))
            self.ff = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.SiLU(),
                                                  nn.Linear(4 * d, d)) for _ in range(blocks))

        def forward(self, x):
            x = self.sub(x)
            b, c, t, f = x.shape
            x = self.lin(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
            for i in range(len(self.att)):
                h = self.ln[2 * i](x)
                x = x + self.att[i](h, h, h, need_weights=False)[0]
                h = F.glu(self.pw1[i](self.ln[2 * i + 1](x).transpose(1, 2)), 1)
                h = self.pw2[i](F.silu(self.bn[i](self.dw[i](h))))
                x = x + h.transpose(1, 2)
                x = x + 0.5 * self.ff[i](x)
            return x

    class Block(nn.Module):  # ConvNeXt
        def __init__(self, c):
            super().__init__()
            self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
            self.ln, self.f1, self.f2 = nn.LayerNorm(c), nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(self, x):
            h = self.ln(self.dw(x).permute(0, 2, 3, 1))
            return x + self.f2(F.gelu(self.f1(h))).permute(0, 3, 1, 2)

    class ChannelNorm(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.ln = nn.LayerNorm(c)

        def forward(self, x):
            return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class ConvNeXt(nn.Module):
        def __init__(self, dims=(40, 80, 160, 320), depths=(2, 2, 6, 2)):
            super().__init__()
            layers = [nn.Conv2d(3, dims[0], 4, 4), ChannelNorm(dims[0])]
            for i, (d, n) in enumerate(zip(dims, depths)):
                if i:
                    layers += [ChannelNorm(dims[i - 1]), nn.Conv2d(dims[i - 1], d, 2, 2)]
                layers += [Block(d) for _ in range(n)]
            self.body, self.ln, self.head = (nn.Sequential(*layers), nn.LayerNorm(dims[-1]),
                                             nn.Linear(dims[-1], 1000))

        def forward(self, x):
            return self.head(self.ln(self.body(x).mean((2, 3))))

    class ViT(nn.Module):
        def __init__(self, d=192):
            super().__init__()
            self.patch = nn.Conv2d(3, d, 16, 16)
            layer = nn.TransformerEncoderLayer(d, 3, 4 * d, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.enc = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
            self.cls, self.pos = nn.Parameter(torch.randn(1, 1, d)), nn.Parameter(
                torch.randn(1, 197, d))
            self.head = nn.Linear(d, 1000)

        def forward(self, x):
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
            return self.head(self.enc(x)[:, 0])

    class Bert(nn.Module):
        def __init__(self, d=384, heads=12, layers=6):
            super().__init__()
            self.tok, self.pos, self.ln = nn.Embedding(30522, d), nn.Embedding(512, d), (
                nn.LayerNorm(d))
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, activation="gelu",
                                               batch_first=True)
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            return self.enc(self.ln(self.tok(ids) + self.pos(pos)))

    class MixBlock(nn.Module):  # SegFormer: attention on a strided-conv-reduced K/V, Mix-FFN
        def __init__(self, d, heads, r):
            super().__init__()
            self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
            self.att = nn.MultiheadAttention(d, heads, batch_first=True)
            self.sr = nn.Conv2d(d, d, r, r) if r > 1 else nn.Identity()
            self.f1, self.dw, self.f2 = (nn.Linear(d, 4 * d),
                                         nn.Conv2d(4 * d, 4 * d, 3, 1, 1, groups=4 * d),
                                         nn.Linear(4 * d, d))

        def forward(self, t, h, w):
            b, n, d = t.shape
            q = self.n1(t)
            kv = self.n3(self.sr(q.transpose(1, 2).reshape(b, d, h, w)).flatten(2)
                         .transpose(1, 2))
            t = t + self.att(q, kv, kv, need_weights=False)[0]
            y = self.f1(self.n2(t)).transpose(1, 2).reshape(b, 4 * d, h, w)
            return t + self.f2(F.gelu(self.dw(y).flatten(2).transpose(1, 2)))

    class SegFormer(nn.Module):
        def __init__(self, dims=(32, 64, 160, 256), heads=(1, 2, 5, 8), rs=(8, 4, 2, 1)):
            super().__init__()
            self.embed = nn.ModuleList(nn.Conv2d(c, d, 7 if i == 0 else 3, 4 if i == 0 else 2,
                                                 3 if i == 0 else 1)
                                       for i, (c, d) in enumerate(zip((3,) + dims, dims)))
            self.blocks = nn.ModuleList(nn.ModuleList(MixBlock(d, h, r) for _ in range(2))
                                        for d, h, r in zip(dims, heads, rs))
            self.lin = nn.ModuleList(nn.Conv2d(d, 256, 1) for d in dims)
            self.fuse, self.cls = nn.Conv2d(1024, 256, 1), nn.Conv2d(256, 19, 1)

        def forward(self, x):
            feats = []
            for embed, blocks in zip(self.embed, self.blocks):
                x = embed(x)
                b, d, h, w = x.shape
                t = x.flatten(2).transpose(1, 2)
                for blk in blocks:
                    t = blk(t, h, w)
                x = t.transpose(1, 2).reshape(b, d, h, w)
                feats.append(x)
            size = feats[0].shape[2:]
            up = [F.interpolate(lin(f), size=size, mode="bilinear") for lin, f in
                  zip(self.lin, feats)]
            return self.cls(F.relu(self.fuse(torch.cat(up, 1))))

    def cbr(i, o, k=1, s=1, d=1, g=1):
        return nn.Sequential(nn.Conv2d(i, o, k, s, d * (k // 2), dilation=d, groups=g,
                                       bias=False), nn.BatchNorm2d(o), nn.ReLU6())

    class DeepLab(nn.Module):  # MobileNetV2 backbone at output stride 8, ASPP
        def __init__(self):
            super().__init__()
            def block(i, o, s, d=1, e=6):
                return nn.Sequential(cbr(i, i * e), cbr(i * e, i * e, 3, s, d, i * e),
                                     nn.Conv2d(i * e, o, 1, bias=False), nn.BatchNorm2d(o))
            self.body = nn.Sequential(
                cbr(3, 32, 3, 2), block(32, 16, 1, e=1), block(16, 24, 2), block(24, 24, 1),
                block(24, 32, 2), block(32, 32, 1), block(32, 64, 1, 2), block(64, 96, 1, 2),
                block(96, 160, 1, 4), block(160, 320, 1, 4))
            self.aspp = nn.ModuleList([cbr(320, 256)] + [cbr(320, 256, 3, d=r)
                                                         for r in (6, 12, 18)])
            self.proj, self.cls = cbr(1024, 256), nn.Conv2d(256, 21, 1)

        def forward(self, x):
            f = self.body(x)
            f = self.proj(torch.cat([a(f) for a in self.aspp], 1))
            return F.interpolate(self.cls(f), size=x.shape[2:], mode="bilinear")

    class UltraFace(nn.Module):  # the RFB-320 face detector's slim backbone and heads
        def __init__(self):
            super().__init__()
            relu = lambda c, k=3, s=1, g=1: nn.Sequential(  # noqa: E731
                nn.Conv2d(c[0], c[1], k, s, k // 2, groups=g, bias=False),
                nn.BatchNorm2d(c[1]), nn.ReLU())
            def dw(i, o, s):
                return nn.Sequential(relu((i, i), 3, s, i), relu((i, o), 1))
            self.b1 = nn.Sequential(relu((3, 16), 3, 2), dw(16, 32, 1), dw(32, 32, 2),
                                    dw(32, 32, 1), dw(32, 64, 2), dw(64, 64, 1),
                                    dw(64, 64, 1), dw(64, 64, 1))
            self.b2 = nn.Sequential(dw(64, 128, 2), dw(128, 128, 1), dw(128, 128, 1))
            self.b3 = nn.Sequential(dw(128, 256, 2), dw(256, 256, 1))
            self.heads = nn.ModuleList(nn.Conv2d(c, 18, 3, 1, 1) for c in (64, 128, 256))

        def forward(self, x):
            a = self.b1(x)
            b = self.b2(a)
            c = self.b3(b)
            return torch.cat([h(f).permute(0, 2, 3, 1).reshape(1, -1, 6)
                              for h, f in zip(self.heads, (a, b, c))], 1)

    class RegNetX(nn.Module):  # RegNetX-400MF: group width 16, bottleneck ratio 1
        def __init__(self):
            super().__init__()
            def cbr(i, o, k=1, s=1, g=1, relu=True):
                return nn.Sequential(nn.Conv2d(i, o, k, s, k // 2, groups=g, bias=False),
                                     nn.BatchNorm2d(o), *([nn.ReLU()] if relu else []))

            class Block(nn.Module):
                def __init__(self, i, o, s):
                    super().__init__()
                    self.f = nn.Sequential(cbr(i, o), cbr(o, o, 3, s, o // 16),
                                           cbr(o, o, relu=False))
                    self.sc = None if i == o and s == 1 else cbr(i, o, 1, s, relu=False)

                def forward(self, x):
                    return torch.relu(self.f(x) + (x if self.sc is None else self.sc(x)))

            blocks, c = [], 32
            for o, n in ((32, 1), (64, 2), (160, 7), (400, 12)):
                for k in range(n):
                    blocks.append(Block(c, o, 2 if k == 0 else 1))
                    c = o
            self.body = nn.Sequential(cbr(3, 32, 3, 2), *blocks)
            self.fc = nn.Linear(400, 1000)

        def forward(self, x):
            return self.fc(self.body(x).mean((2, 3)))

    return {"vocoder": Vocoder, "logmel": LogMel, "wav2vec": Wav2Vec,
            "conformer": Conformer, "convnext": ConvNeXt, "vit": ViT, "bert": Bert,
            "segformer": SegFormer, "deeplab": DeepLab, "ultraface": UltraFace,
            "regnetx": RegNetX}


def export(name: str, cache: Path) -> Path:
    """``cache/name.onnx``: the family's module (seed 0, eval mode) at its input."""
    path = cache / f"{name}.onnx"
    if path.exists():
        return path
    import torch

    torch.manual_seed(0)
    model = _modules()[name]().eval()
    key, shape, dtype = INPUTS[name]
    x = (torch.randint(0, 30522, shape) if dtype == np.int64 else torch.randn(*shape))
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.onnx.export(model, (x,), str(tmp), opset_version=17, input_names=[key],
                      dynamo=False)
    tmp.replace(path)
    return path


def feeds(name: str) -> dict[str, np.ndarray]:
    """The model's seeded input (token ids below 30522 for ``bert``)."""
    key, shape, dtype = INPUTS[name]
    rng = np.random.default_rng(0)
    if dtype == np.int64:
        return {key: rng.integers(0, 30522, shape).astype(np.int64)}
    return {key: rng.standard_normal(shape).astype(np.float32)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "monolib" / "families"))
    args = ap.parse_args()
    names = args.models.split(",")
    unknown = sorted(set(names) - set(INPUTS))
    if unknown:
        ap.error(f"unknown models {unknown}: choose from {sorted(INPUTS)}")
    table(names, [int(t) for t in args.threads.split(",")], args.calls,
          lambda name: export(name, Path(args.cache)), feeds)


if __name__ == "__main__":
    main()
