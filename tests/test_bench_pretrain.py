"""bench/pretrain.py, which gives bench/speed.py trained weights: folding the BatchNorms it
trains with leaves the function unchanged, and a short run learns the digits."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch

from tests.torch_models import MobileNetV2

_SPEC = importlib.util.spec_from_file_location(
    "bench_pretrain", Path(__file__).resolve().parents[1] / "bench" / "pretrain.py")
pretrain = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(pretrain)

FOLD_RTOL = 1e-4  # folding reassociates BN's scale into the conv's fp32 products
RESOLUTION = 32  # the digits at 32x32: the network's real structure, seconds of training


def test_folding_keeps_the_function() -> None:
    torch.manual_seed(0)
    net = pretrain.with_bn(MobileNetV2(0.35, RESOLUTION, 10))
    x_tr, _, x_te, _ = pretrain.digits_rgb(RESOLUTION)
    net.train()
    with torch.no_grad():  # running statistics that are not the identity
        net(torch.tensor(x_tr[:64]))
    net.eval()
    with torch.no_grad():
        before = net(torch.tensor(x_te[:16])).numpy()
        after = pretrain.fold_bn(net)(torch.tensor(x_te[:16])).numpy()
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    np.testing.assert_allclose(after, before, rtol=FOLD_RTOL,
                               atol=FOLD_RTOL * np.abs(before).max())


def test_pretraining_learns_the_digits() -> None:
    x_tr, y_tr, x_te, y_te = pretrain.digits_rgb(RESOLUTION)
    assert x_tr.shape[1:] == (3, RESOLUTION, RESOLUTION) and len(x_te) == pretrain.HELD_OUT
    torch.manual_seed(0)
    net = MobileNetV2(0.35, RESOLUTION, 10)
    chance = pretrain.accuracy(net.eval(), x_te, y_te)
    acc = pretrain.accuracy(pretrain.pretrain(net, x_tr, y_tr), x_te, y_te)
    assert acc > 0.8 > chance + 0.3, (chance, acc)
