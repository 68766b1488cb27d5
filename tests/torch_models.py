"""PyTorch reference models shared by the parity tests and the benchmarks."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn


class MLP(nn.Module):
    """Digits MLP: 64 -> 32 -> 10."""

    input_shape = (64,)

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)


class AifesCNN(nn.Module):
    """AIfES's CNN example shape: 1x16x16 -> conv3x3 8 -> ReLU -> maxpool 2 -> conv3x3 16 ->
    ReLU -> maxpool 2 -> dense 10 (fp32; the MLP 64-32-10 above is AIfES's MLP)."""

    input_shape = (1, 16, 16)

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


class DigitsCNN(nn.Module):
    """Conv, depthwise, pointwise, ReLU6, a residual add, global pool and a linear head."""

    input_shape = (1, 8, 8)

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.act = nn.ReLU6()
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = self.act(self.stem(x))
        h = h + self.pw(self.act(self.dw(h)))
        h = self.act(self.down(h))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, r: int = 4) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(c, c // r, 1)
        self.expand = nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = x.mean(dim=(2, 3), keepdim=True)
        return x * nn.functional.hardsigmoid(self.expand(torch.relu(self.reduce(s))))


class InvertedResidual(nn.Module):
    """MobileNetV2/V3 block: 1x1 expand, 3x3 depthwise, optional SE, 1x1 project (+ skip)."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, se: bool = False,
                 act: type[nn.Module] = nn.Hardswish) -> None:
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, mid, 1), act()]
        layers += [nn.Conv2d(mid, mid, 3, stride, 1, groups=mid), act()]
        if se:
            layers.append(SqueezeExcite(mid))
        layers.append(nn.Conv2d(mid, cout, 1))
        self.body = nn.Sequential(*layers)
        self.skip = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.skip else y


class TinyMobileNet(nn.Module):
    """A MobileNetV2-style stack with squeeze-excitation and HardSwish, for 8x8 digits."""

    input_shape = (1, 8, 8)

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.Hardswish())
        self.blocks = nn.Sequential(InvertedResidual(8, 8, 1, 2, se=True),
                                    InvertedResidual(8, 12, 2, 3, se=True),
                                    InvertedResidual(12, 12, 1, 2))
        self.head = nn.Sequential(nn.Conv2d(12, 24, 1), nn.Hardswish())
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        h = self.head(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(h.mean(dim=(2, 3)), 1))


class OpsMix(nn.Module):
    """The remaining trainable ops in one graph: LeakyReLU, padded MaxPool, Sigmoid, Tanh,
    Concat, ZeroPad, AvgPool, HardSigmoid, Mul by a constant, and a Flatten of a feature map
    that is not 1x1 (a real layout change before the Linear)."""

    input_shape = (1, 8, 8)

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(12, 8, 3, padding=0)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x):
        h = nn.functional.leaky_relu(self.conv1(x), 0.1)
        h = nn.functional.max_pool2d(h, 3, stride=2, padding=1)  # 4x4
        h = torch.cat([torch.sigmoid(h), torch.tanh(h) * 0.5], dim=1)
        h = nn.functional.pad(h, (1, 1, 1, 1))  # 6x6
        h = nn.functional.avg_pool2d(nn.functional.hardsigmoid(self.conv2(h)), 2)  # 4x4 -> 2x2
        return self.fc(torch.flatten(h, 1))


def _c(v: float, w: float) -> int:
    """Channels scaled by width multiplier w, rounded to a multiple of 8 (MobileNet rule)."""
    c = max(8, int(v * w + 4) // 8 * 8)
    return c + 8 if c < 0.9 * v * w else c


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018) with a width multiplier, BN folded away (eval export).

    By default there is no final 1x1 "feature mix" conv: the last block's projection (112
    channels at w0.35) feeds the pool, as in the network TTE trains (52 convs counting the
    classifier), so TTE's `manual_weight_idx` lands on the layer it meant. `feature_mix=1280`
    adds the paper's final 1x1 conv + ReLU6 (the paper keeps 1280 below width 1.0)."""

    # (expansion t, channels c, repeats n, stride s) from the paper's Table 2
    CFG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, width: float = 0.35, resolution: int = 128, classes: int = 10,
                 feature_mix: int | None = None) -> None:
        super().__init__()
        self.input_shape = (3, resolution, resolution)
        cin = _c(32, width)
        layers: list[nn.Module] = [nn.Conv2d(3, cin, 3, 2, 1), nn.ReLU6()]
        for t, c, n, s in self.CFG:
            cout = _c(c, width)
            for k in range(n):
                layers.append(InvertedResidual(cin, cout, s if k == 0 else 1, t, act=nn.ReLU6))
                cin = cout
        if feature_mix:
            layers += [nn.Conv2d(cin, feature_mix, 1), nn.ReLU6()]
            cin = feature_mix
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def export(model: nn.Module, path: Path) -> Path:
    model.eval()
    x = torch.zeros((1, *model.input_shape))
    torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["logits"])
    return path


class MBConv(nn.Module):
    """ProxylessNAS/MCUNet mobile inverted bottleneck with a k x k depthwise conv (k = 3/5/7):
    1x1 expand (omitted when expand == 1), k x k depthwise, 1x1 project, identity skip when
    stride 1 and cin == cout. ReLU6 everywhere but after the projection; BN folded away."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int,
                 mid: int | None = None) -> None:
        super().__init__()
        mid = mid or round(cin * expand)
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, mid, 1), nn.ReLU6()]
        layers += [nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid), nn.ReLU6(),
                   nn.Conv2d(mid, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.skip = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.skip else y


def _c_up(v: float, w: float) -> int:
    """Channels scaled by width multiplier w, rounded UP to a multiple of 8 (at least 8)."""
    return max(8, math.ceil(round(v * w, 6) / 8) * 8)


class ProxylessNAS(nn.Module):
    """ProxylessNAS-Mobile (Cai et al., ICLR 2019) with a width multiplier, BN folded away.

    Block list: `proxyless_mobile.json` as released by MIT HAN lab (github.com/mit-han-lab/
    tinyml, mcunet/assets/configs/proxyless_mobile.json; the `proxyless_mobile` net of
    mit-han-lab/proxylessnas): first conv 3x3/2 to 32, MBConv1 3x3 to 16, then the 21 searched
    blocks in CFG, two of which are ZeroLayer blocks (the search chose "skip", so the block
    is the identity) and are left out here; then global average pool and the classifier. At
    width 1.0, 224x224, 1000 classes with ProxylessNAS-Mobile's 1280-wide feature mix conv
    this is 320.4M MACs and 4.06M parameters (published: ~320M, 4.1M).

    By default there is no 1x1 "feature mix" conv before the pool, as in the network TTE trains
    (61 convs counting the classifier), so TTE's `manual_weight_idx` lands on the layer it
    meant; `feature_mix=N` adds one (1280 in ProxylessNAS-Mobile). Channels are width * c
    rounded UP to a multiple of 8 (`zoo_rounding=True`, inferred from the MCUNet model zoo's
    `proxyless-w0.3` totals; it differs from MobileNet's `make_divisible` only at the 192
    stage at w0.3, 57.6 -> 64, not 56); `zoo_rounding=False` uses `make_divisible` (`_c`).
    Expanded widths are round(cin * expand) of the scaled cin.
    """

    # (kernel, expansion, channels, stride) per block after the MBConv1 3x3 -> 16 block
    CFG = ((5, 3, 32, 2), (3, 3, 32, 1),  # + 2 ZeroLayer (skipped) blocks at 32
           (7, 3, 40, 2), (3, 3, 40, 1), (5, 3, 40, 1), (5, 3, 40, 1),
           (7, 6, 80, 2), (5, 3, 80, 1), (5, 3, 80, 1), (5, 3, 80, 1),
           (5, 6, 96, 1), (5, 3, 96, 1), (5, 3, 96, 1), (5, 3, 96, 1),
           (7, 6, 192, 2), (7, 6, 192, 1), (7, 3, 192, 1), (7, 3, 192, 1),
           (7, 6, 320, 1))

    def __init__(self, width: float = 0.3, resolution: int = 128, classes: int = 10,
                 feature_mix: int | None = None, zoo_rounding: bool = True) -> None:
        super().__init__()
        self.input_shape = (3, resolution, resolution)
        ch = _c_up if zoo_rounding else _c
        cin, first = ch(32, width), ch(16, width)
        layers: list[nn.Module] = [nn.Conv2d(3, cin, 3, 2, 1), nn.ReLU6(),
                                   MBConv(cin, first, 3, 1, 1)]
        cin = first
        for k, t, c, s in self.CFG:
            cout = ch(c, width)
            layers.append(MBConv(cin, cout, k, s, t))
            cin = cout
        if feature_mix:
            layers += [nn.Conv2d(cin, feature_mix, 1), nn.ReLU6()]
            cin = feature_mix
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class MCUNet5FPS(nn.Module):
    """MCUNet-5FPS-like model (MCUNet, Lin et al., NeurIPS 2020), BN folded away.

    Block list: `mcunet-5fps_imagenet.json` (model zoo id `mcunet-in1` / `mcunet-5fps`), the
    TinyNAS net that runs 5 FPS on an STM32F746, as released by MIT HAN lab (github.com/
    mit-han-lab/tinyml, mcunet/assets/configs/mcunet-5fps_imagenet.json; mit-han-lab/mcunet
    downloads the same file): first conv 3x3/2 to 16, the 14 blocks below, no final 1x1
    "feature mix" conv (`feature_mix_layer: null`), global pool, fc 160 -> classes. The zoo
    runs it at 96x96; TTE ("On-Device Training Under 256KB Memory") trains it at 128x128.
    At 96x96 and 1000 classes this is 12.79M MACs and 0.63M parameters (mcunet README:
    12.8M, 0.64M; the gap is the BN parameters).

    It is "-like", an approximation of the published model, not the model itself: the block
    list (kernel, expansion, channels, stride, skips) is copied from that json, but BN is
    folded away, the head is a fresh classes-way fc, no weights are loaded, and TTE's own copy
    (tiny-training assets/mcu_models/mcunet-5fps.pkl, an int8 graph) could not be read here, so
    whether it differs from the json in any detail is unchecked.
    """

    # (kernel, expansion, channels, stride) per block, from mcunet-5fps_imagenet.json
    CFG = ((3, 1, 8, 1),
           (3, 4, 16, 2), (3, 3, 16, 1),
           (7, 3, 24, 2), (3, 5, 24, 1),
           (3, 5, 40, 2), (7, 4, 40, 1),
           (5, 4, 48, 1), (3, 3, 48, 1), (3, 4, 48, 1),
           (7, 5, 96, 2), (5, 4, 96, 1), (5, 4, 96, 1),
           (3, 6, 160, 1))

    def __init__(self, resolution: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.input_shape = (3, resolution, resolution)
        cin = 16
        layers: list[nn.Module] = [nn.Conv2d(3, cin, 3, 2, 1), nn.ReLU6()]
        for k, t, c, s in self.CFG:
            layers.append(MBConv(cin, c, k, s, t))
            cin = c
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class Conv1dNet(nn.Module):
    """A sensor-window classifier: 3 channels x 32 steps -> Conv1d 5 (+BN, ReLU) -> depthwise
    Conv1d 3 stride 2 (ReLU) -> MaxPool1d 2 -> pointwise Conv1d -> global mean -> Linear 4."""

    input_shape = (3, 32)

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(3, 8, 5, padding=2), nn.BatchNorm1d(8), nn.ReLU(),
            nn.Conv1d(8, 8, 3, stride=2, padding=1, groups=8), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(8, 16, 1), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
            nn.Linear(16, 4))

    def forward(self, x):
        return self.net(x)


class RecurrentNet(nn.Module):
    """nn.LSTM or nn.GRU over a window, then Linear on the last step's output (`out[:, -1]`)
    or on the last layer's final state (`h_n[-1]`). x is in the cell's own layout: (N, T, C),
    or (T, N, C) when `time_major`. `initial_state` passes a fixed nonzero h0 (and c0),
    exported as constants."""

    def __init__(self, cell: str = "lstm", inputs: int = 3, hidden: int = 8, layers: int = 1,
                 steps: int = 32, classes: int = 4, time_major: bool = False,
                 from_state: bool = False, initial_state: bool = False) -> None:
        super().__init__()
        kind = {"lstm": nn.LSTM, "gru": nn.GRU}[cell]
        self.cell, self.time_major, self.from_state = cell, time_major, from_state
        self.rnn = kind(inputs, hidden, num_layers=layers, batch_first=not time_major)
        self.fc = nn.Linear(hidden, classes)
        self.input_shape = (steps, 1, inputs) if time_major else (steps, inputs)
        self.stateful = initial_state
        if initial_state:
            g = torch.Generator().manual_seed(7)
            self.register_buffer("h0", 0.5 * torch.randn(layers, 1, hidden, generator=g))
            self.register_buffer("c0", 0.5 * torch.randn(layers, 1, hidden, generator=g))

    def forward(self, x):
        state = None
        if self.stateful:
            state = (self.h0, self.c0) if self.cell == "lstm" else self.h0
        y, h = self.rnn(x, state)
        if self.from_state:
            h = h[0] if self.cell == "lstm" else h
            return self.fc(h[-1])
        return self.fc(y[-1] if self.time_major else y[:, -1])


def export_recurrent(model: RecurrentNet, path: Path) -> Path:
    """The legacy exporter with a batch of one: input (1, T, C), or (T, 1, C) time-major."""
    import warnings

    model.eval()
    shape = model.input_shape if model.time_major else (1, *model.input_shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter warns about batch sizes of RNNs
        torch.onnx.export(model, (torch.zeros(shape),), str(path), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["logits"])
    return path
