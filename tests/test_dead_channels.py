"""Dead and near-dead channels of real-data int8 networks (bench/real_weights.py): BN-folded
weights ~1e-20 underflow a channel's requantisation multiplier to 0 (its int32 bias saturates),
decayed ones give right shifts past 22. The compiler gives a zero multiplier shift -1 (the
optimised kernels' fast requantisation wants a right shift; every kernel gives such a channel
out_offset whatever its shift), and the int8 forward stays what it was: the C build (optimised
and reference kernels) against the numpy reference with the old shift 0."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest

from tinytrain.quant.fixedpoint import quantize, quantize_multiplier
from tinytrain.quant.params import channel_multiplier, requant

torch = pytest.importorskip("torch")

from torch_models import DigitsCNN, export  # noqa: E402

from tinytrain.device.build import build  # noqa: E402
from tinytrain.device.runner import HostProgram  # noqa: E402
from tinytrain.ops import interp  # noqa: E402
from tinytrain.passes.pipeline import Options, compile_model  # noqa: E402

DEAD, NEAR = 1e-20, 2.0**-20  # bench/real_weights.py's factors


def test_a_zero_multiplier_gets_shift_minus_one():
    assert quantize_multiplier(0.0) == (0, 0)
    assert channel_multiplier(0.0) == (0, -1)
    assert channel_multiplier(1e-40) == (0, -1)  # underflows: shift < -31
    for real in (0.75, 3e-3, 2.0**-30, 1.5):
        assert channel_multiplier(real) == quantize_multiplier(real)
    a = requant(0.02, -128, (0.01, 1e-22, 0.0), 0.05, -128, "RELU6", (-128, 127))
    assert a["mult"][1:] == (0, 0) and a["shift"][1:] == (-1, -1)
    assert a["mult"][0] > 0 and a["shift"][0] == quantize_multiplier(0.02 * 0.01 / 0.05)[1]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> tuple[Path, Path]:
    """DigitsCNN with random weights, channel 3 of every conv dead (the depthwise one behind
    the stem's too) and channel 5 of the pointwise conv near-dead."""
    root = tmp_path_factory.mktemp("dead")
    torch.manual_seed(0)
    net = DigitsCNN().eval()
    with torch.no_grad():
        for conv in (net.stem, net.dw, net.pw, net.down):
            conv.weight[3] *= DEAD
            conv.bias[3] = 0.5  # a dead channel keeps its bias (BN's beta)
        net.pw.weight[5] *= NEAR
        net.pw.bias[5] *= NEAR
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export(net, root / "dead.onnx")
    rng = np.random.default_rng(0)
    np.savez(root / "calib.npz", x=rng.random((64, 1, 8, 8), np.float32))
    return path, root / "calib.npz"


def _convs(nodes) -> list:
    """The forward int8 convs, row streams opened."""
    out = []
    for n in nodes:
        if n.attrs.get("_nodes"):
            out += _convs(n.attrs["_nodes"])
        elif n.op == "conv2d_q8" and n.phase == "forward":
            out.append(n)
    return out


def _old_shifts(nodes) -> list:
    """The nodes with shift 0 for every zero multiplier, as quantize_multiplier gives it."""
    out = []
    for n in nodes:
        a = n.attrs
        if a.get("_nodes"):
            n = dataclasses.replace(n, attrs={**a, "_nodes": _old_shifts(a["_nodes"])})
        elif n.op == "conv2d_q8":
            n = dataclasses.replace(n, attrs={**a, "shift": tuple(
                0 if m == 0 else s for m, s in zip(a["mult"], a["shift"], strict=True))})
        out.append(n)
    return out


@pytest.mark.parametrize("update,kernels", [("none", "optimized"), ("full", "optimized"),
                                            ("none", "reference")])
def test_dead_channels_forward_unchanged(model, tmp_path, update, kernels):
    path, calib = model
    opts = Options(update=update, quantize="int8", calib=calib, kernels=kernels)
    g, _ = compile_model(path, opts)
    convs = _convs(g.nodes)
    assert len(convs) == 4
    for n in convs:
        m, s = n.attrs["mult"], n.attrs["shift"]
        assert m[3] == 0 and s[3] == -1, n.name
        assert all(v > 0 for i, v in enumerate(m) if i != 3), n.name
        b = g.t(n.inputs[2]).data.reshape(-1)
        assert abs(int(b[3])) >= 2**30, n.name  # clipped: past the fast path's bound before
    pw = next(n for n in convs if n.attrs["kernel"] == (1, 1))
    assert pw.attrs["shift"][5] < -22  # near-dead
    # the reference as it was: shift 0 for the zero multipliers (a training build's forward
    # reads its widened weights: the same graph's forward)
    old = g.replace(nodes=_old_shifts(g.nodes))
    assert all(n.attrs["shift"][3] == 0 for n in _convs(old.nodes))
    build(path, tmp_path / "b", opts)
    q_in = g.t(g.inputs[0]).quant
    name = next(n.outputs[0] for n in old.nodes if n.op == "dense_q8")  # the int8 logits
    out = old.t(name).quant
    rng = np.random.default_rng(1)
    with HostProgram(tmp_path / "b") as p:
        for x in rng.random((20, 64), np.float32):
            ours = p.infer(x)  # real values scale * (q - zp)
            ours = np.round(ours.astype(np.float64) / out.scale[0]) + out.zero_point[0]
            env = interp.initial_state(old)
            xq = quantize(x, q_in.scale[0], q_in.zero_point[0])  # as the device takes it
            interp.run(old, env, {old.inputs[0]: xq.reshape(old.t(old.inputs[0]).shape)},
                       phases=("forward",))
            want = env[name].reshape(-1)
            assert np.array_equal(ours.astype(np.int64), want.astype(np.int64))
