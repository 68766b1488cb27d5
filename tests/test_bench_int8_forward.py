"""bench/int8_forward.py: PyTorch running bench/auto_plan.py's MobileNetV2 as the int8 build
runs it. The oracle is the build itself: the int8 graph's numpy forward (tinytrain's bit-exact
reference of the C kernels) for a plan that trains weights (their grids widened), on digits.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import auto_plan  # noqa: E402
from int8_forward import Int8Forward, build_quant, widened, with_activations  # noqa: E402
from torch import nn  # noqa: E402

from tinytrain.ops import interp  # noqa: E402
from tinytrain.passes.pipeline import Options, import_model  # noqa: E402
from tinytrain.quant.fixedpoint import quantize  # noqa: E402

SPEC = "last:4"  # the head, a project conv, a depthwise and an expand conv: widened weights
SAMPLES = 8
# PyTorch's float32 convolutions against the int8 kernels' exact integer sums: an activation
# whose real value lies within float rounding of a rounding boundary lands one LSB apart, and
# such differences travel and grow with depth; measured over the 51 convs and 10 adds: at most
# 3 LSB apart, 80-99.9 % of each tensor identical
MAX_LSB = 3
MIN_SAME = 0.7
ON_GRID = 1e-3  # LSB: a value PyTorch left unrounded is typically a quarter LSB off the grid


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("int8fwd")
    d = auto_plan.mobilenet_task()
    torch.manual_seed(0)
    net = auto_plan.MobileNetV2(5, bn=False).eval()  # random weights: the mapping is the test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = auto_plan.export(net, auto_plan.MobileNetV2.input_shape, root / "m.onnx")
    np.savez(root / "calib.npz", x=d["calib_x"][:32])
    # the calibrated logit range (no --new-head, whose +-16 a random net's logits would not
    # fill): every logit LSB tells
    opts = Options(board="host", quantize="int8", calib=root / "calib.npz")
    state = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    return {"d": d, "model": model, "opts": opts, "state": state}


def _int8_tensors(g, x: np.ndarray) -> dict[str, np.ndarray]:
    """The build's conv and add outputs (int8, numpy reference forward) over the samples."""
    names = [n.outputs[0] for n in g.nodes if n.op in ("conv2d_q8", "add_q8")]
    base, q_in = interp.initial_state(g), g.t(g.inputs[0]).quant
    out: dict[str, list] = {k: [] for k in names}
    for xi in x:
        env = dict(base)
        xq = quantize(xi, q_in.scale[0], q_in.zero_point[0])  # as the device takes a sample
        interp.run(g, env, {g.inputs[0]: xq.reshape(g.t(g.inputs[0]).shape)})
        for k in names:
            out[k].append(env[k])
    return {k: np.stack(v).astype(np.int32) for k, v in out.items()}


def test_pytorch_runs_the_int8_builds_forward(world) -> None:
    """Every conv's and residual add's output, in the order the build computes them, lies on
    the build's int8 grid and matches the build's values; the logits are left real for the
    loss and rounded for inference."""
    x = world["d"]["test_x"][:SAMPLES]
    g0 = import_model(world["model"], world["opts"])
    g = widened(g0, SPEC, world["opts"])
    want = _int8_tensors(g, x)
    quant = build_quant(g0, SPEC, world["opts"])
    net = auto_plan.MobileNetV2(5, bn=False).eval()
    net.load_state_dict({k: torch.tensor(v) for k, v in world["state"].items()})
    m = Int8Forward(net, quant)
    seen: list[np.ndarray] = []  # hooks after Int8Forward's see its rounded outputs
    for mod in net.modules():
        if isinstance(mod, nn.Conv2d) or getattr(mod, "skip", False):
            mod.register_forward_hook(lambda _m, _i, y: seen.append(y.detach().numpy()))
    with torch.no_grad():
        real = m(torch.tensor(x)).numpy()  # the loss's unrounded logits
        m.round_logits = True
        rounded = m(torch.tensor(x)).numpy()
    convs = [n for n in g.nodes if n.op in ("conv2d_q8", "add_q8")]
    assert len(seen) == 2 * len(convs)  # two forwards, each through every conv and add
    for n, y in zip(convs, seen, strict=False):
        q = g.t(n.outputs[0]).quant
        lsb = y.transpose(0, 2, 3, 1) / q.scale[0]  # NCHW -> the build's NHWC
        assert np.abs(lsb - np.round(lsb)).max() <= ON_GRID, n.name
        d = np.abs(np.round(lsb).astype(np.int32) + q.zero_point[0] -
                   want[n.outputs[0]].reshape(lsb.shape))
        assert d.max() <= MAX_LSB and (d == 0).mean() >= MIN_SAME, (n.name, d.max(),
                                                                    (d == 0).mean())
    q = g.t(g.outputs[0]).quant
    lsb = rounded / q.scale[0]
    assert np.abs(lsb - np.round(lsb)).max() <= ON_GRID
    assert np.abs(real / q.scale[0] - lsb).max() <= 0.5 + ON_GRID
    assert np.abs(real / q.scale[0] - lsb).max() > ON_GRID  # the loss's are not rounded
    # the widened grids matter: the file's weights (no headroom) give another forward
    plain = build_quant(g0, "bias", world["opts"])
    assert any(not np.array_equal(a["w"], b["w"])
               for a, b in zip(quant["layers"], plain["layers"], strict=True))


def _first_conv(world, quant: dict) -> tuple[Int8Forward, list]:
    """Int8Forward over `quant` and a list its first conv's rounded outputs land in."""
    net = auto_plan.MobileNetV2(5, bn=False).eval()
    net.load_state_dict({k: torch.tensor(v) for k, v in world["state"].items()})
    m = Int8Forward(net, quant)
    seen: list = []
    conv = next(mod for mod in net.modules() if isinstance(mod, nn.Conv2d))
    conv.register_forward_hook(lambda _m, _i, y: seen.append(y.detach()))
    return m, seen


def test_act_precision_what_ifs(world) -> None:
    """bench/act_precision.py's arms: 16-bit activations lie on a grid 256 times finer over
    the same range (the input sample stays int8); stochastic rounding is exact on average
    while training and is the nearest rounding under no_grad."""
    x = torch.tensor(world["d"]["test_x"][:2])
    g0 = import_model(world["model"], world["opts"])
    q8 = build_quant(g0, SPEC, world["opts"])
    s = float(q8["layers"][0]["y"][0])
    m8, y8 = _first_conv(world, q8)
    m16, y16 = _first_conv(world, with_activations(q8, 16))
    with torch.no_grad():
        m8(x), m16(x)
    fine = y16[0] / (s / 256)
    assert (fine - fine.round()).abs().max() <= FINE_ON_GRID
    assert (y16[0] / s - (y16[0] / s).round()).abs().max() > 0.1  # between int8 steps
    assert (y16[0] - y8[0]).abs().max() <= s / 2 + s / 256  # the same range and values
    mst, yst = _first_conv(world, with_activations(q8, 8, "stochastic"))
    with torch.no_grad():
        mst(x)
    assert torch.equal(yst[0], y8[0])  # inference rounds to nearest
    for _ in range(STOCHASTIC_DRAWS):
        mst(x)  # training: grad enabled
    draws = torch.stack(yst[1:])
    assert (draws / s - (draws / s).round()).abs().max() <= ON_GRID  # each on the int8 grid
    assert not torch.equal(draws[0], draws[1])
    inside = (y16[0] > -120 * s) & (y16[0] < 120 * s)  # clamps aside, as a mean sees them
    err = (draws.mean(0) - y16[0])[inside].abs().mean() / s
    assert err < STOCHASTIC_MEAN_LSB, err
    with pytest.raises(ValueError):
        with_activations(q8, 8, "up")


# float32 holds ~7 significant digits: a value up to 32768 fine steps from zero lies within
# ~0.004 of its step
FINE_ON_GRID = 0.01
STOCHASTIC_DRAWS = 64
# the mean of 64 stochastic roundings of a value is within ~1/sqrt(4 * 64) = 0.06 LSB of it on
# average (a rounding's variance is at most 1/4 LSB^2); nearest rounding is 0.25 off on average
STOCHASTIC_MEAN_LSB = 0.1


def test_act_precision_bench_runs(tmp_path) -> None:
    """bench/act_precision.py end to end on one network and order: every arm trained, the
    differences to fp32, and the SRAM a 16-bit plan would need at least (more than the int8
    plan's)."""
    import act_precision

    res = act_precision.run(1, 1, "last:3", tmp_path, lambda s: None)
    assert list(res["accuracy"]) == list(act_precision.ARMS)
    assert all(len(v) == 1 and 0.2 <= v[0] <= 1.0 for v in res["accuracy"].values())
    s = res["sram"]
    assert 0 < s["activations_at_peak"] < s["total"]
    text = act_precision.table(res)
    assert text.count("\n| ") == 2 + len(act_precision.ARMS) - 1  # separator, arms
    assert f"{(s['total'] + s['activations_at_peak']) / 1024:.1f} KB" in text
