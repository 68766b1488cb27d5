"""Trained weights for the benchmark networks, without downloads: sklearn's digits upscaled to
the network's RGB input, a few epochs of Adam with BatchNorm after every conv (the networks in
tests/torch_models.py have none: BN is folded away, as in TTE's int8 graphs, and they do not
train from scratch without it), then the BN folded back into the convs.

Instruction counts depend on the weights and samples (activation ranges, requantisation paths,
ReLU sparsity), so a speed figure measured on random weights and noise flatters or wrongs the
kernels; this is the closest the bench gets to TTE's ImageNet-pretrained weights offline.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

HELD_OUT = 397  # digits kept out of pretraining: calibration and measurement samples
BATCH = 32


class _ConvBN(nn.Module):
    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.conv, self.bn = conv, nn.BatchNorm2d(conv.out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))

    def fold(self) -> nn.Conv2d:
        """The conv computing conv-then-BN (eval statistics)."""
        s = self.bn.weight / torch.sqrt(self.bn.running_var + self.bn.eps)
        bias = self.conv.bias if self.conv.bias is not None else 0.0
        with torch.no_grad():
            self.conv.weight.mul_(s.reshape(-1, 1, 1, 1))
            b = (bias - self.bn.running_mean) * s + self.bn.bias
            if self.conv.bias is None:
                self.conv.bias = nn.Parameter(b)
            else:
                self.conv.bias.copy_(b)
        return self.conv


def _swap(net: nn.Module, kind: type, make) -> None:
    for name, m in net.named_children():
        if isinstance(m, kind):
            setattr(net, name, make(m))
        else:
            _swap(m, kind, make)


def with_bn(net: nn.Module) -> nn.Module:
    """`net` with a BatchNorm after each conv (in place)."""
    _swap(net, nn.Conv2d, _ConvBN)
    return net


def fold_bn(net: nn.Module) -> nn.Module:
    """`net` (from with_bn) with each BN folded into its conv (in place): the function of the
    BN net in eval mode."""
    net.eval()
    _swap(net, _ConvBN, _ConvBN.fold)
    return net


def digits_rgb(resolution: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train x, train y, held-out x, held-out y): the 8x8 digits in [0, 1] upscaled to
    3 x resolution x resolution (nearest), in a fixed shuffled order."""
    d = load_digits()
    k = resolution // 8
    x = np.kron((d.images / 16.0).astype(np.float32), np.ones((k, k), np.float32))[:, None]
    x = np.repeat(x, 3, axis=1)
    y = d.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(x))
    tr, te = order[:-HELD_OUT], order[-HELD_OUT:]
    return x[tr], y[tr], x[te], y[te]


def pretrain(net: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int = 3, lr: float = 3e-3,
             seed: int = 0) -> nn.Module:
    """`net` trained in place on (x, y) with BN inserted after each conv and folded back; the
    function it computes afterwards is that of the trained net in eval mode."""
    torch.manual_seed(seed)
    with_bn(net)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xt, yt = torch.tensor(x), torch.tensor(y)
    net.train()
    for _ in range(epochs):
        for i in torch.randperm(len(xt)).split(BATCH):
            opt.zero_grad()
            nn.functional.cross_entropy(net(xt[i]), yt[i]).backward()
            opt.step()
    return fold_bn(net)


def accuracy(net: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((net(torch.tensor(x)).argmax(1).numpy() == y).mean())
