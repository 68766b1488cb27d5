"""PyTorch reference models shared by the parity tests and the benchmarks."""

from __future__ import annotations

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
    """MobileNetV2 (Sandler et al. 2018) with a width multiplier, BN folded away (eval export)."""

    # (expansion t, channels c, repeats n, stride s) from the paper's Table 2
    CFG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
           (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, width: float = 0.35, resolution: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.input_shape = (3, resolution, resolution)
        cin = _c(32, width)
        layers: list[nn.Module] = [nn.Conv2d(3, cin, 3, 2, 1), nn.ReLU6()]
        for t, c, n, s in self.CFG:
            cout = _c(c, width)
            for k in range(n):
                layers.append(InvertedResidual(cin, cout, s if k == 0 else 1, t, act=nn.ReLU6))
                cin = cout
        last = _c(1280, max(1.0, width))
        layers += [nn.Conv2d(cin, last, 1), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(last, classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def export(model: nn.Module, path: Path) -> Path:
    model.eval()
    x = torch.zeros((1, *model.input_shape))
    torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["logits"])
    return path
