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
from int8_forward import Int8Forward, build_quant  # noqa: E402

from tinytrain.ops import interp  # noqa: E402
from tinytrain.passes.pipeline import Options, compile_model, import_model  # noqa: E402

SPEC = "last:4"  # the head, a project conv, a depthwise and an expand conv: widened weights
SAMPLES = 24
# PyTorch's float32 convolutions against the int8 kernels' exact integer sums: an activation
# whose real value lies within float rounding of a rounding boundary lands one LSB apart, and
# the difference travels; measured: logits at most 1 LSB apart, most identical
MAX_LOGIT_LSB = 1
MIN_SAME = 0.6  # of the logits identical (measured: 80 % of logits spanning 250 LSBs)


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


def _int8_logits(world: dict, x: np.ndarray) -> tuple[np.ndarray, float]:
    """The build's int8 logits (numpy reference forward) in LSBs, and one LSB."""
    opts = world["opts"]
    g, _ = compile_model(world["model"], Options(**{**opts.__dict__, "update": SPEC}))
    base = interp.initial_state(g)
    q_in, q_out = g.t(g.inputs[0]).quant, g.t(g.outputs[0]).quant
    out = []
    for xi in x:
        env = dict(base)
        xq = np.clip(np.round(xi / q_in.scale[0]) + q_in.zero_point[0], -128, 127)
        interp.run(g, env, {g.inputs[0]: xq.astype(np.int8).reshape(g.t(g.inputs[0]).shape)},
                   phases=("forward",))
        out.append(env[g.outputs[0]].astype(np.int32) - q_out.zero_point[0])
    return np.stack(out), q_out.scale[0]


def test_pytorch_runs_the_int8_builds_forward(world) -> None:
    x = world["d"]["test_x"][:SAMPLES]
    want, lsb = _int8_logits(world, x)
    quant = build_quant(import_model(world["model"], world["opts"]), SPEC, world["opts"])
    net = auto_plan.MobileNetV2(5, bn=False).eval()
    net.load_state_dict({k: torch.tensor(v) for k, v in world["state"].items()})
    m = Int8Forward(net, quant)
    with torch.no_grad():
        real = m(torch.tensor(x)).numpy()  # the loss's unrounded logits
        m.round_logits = True
        got = np.round(m(torch.tensor(x)).numpy() / lsb).astype(np.int32)
    assert np.abs(got - want).max() <= MAX_LOGIT_LSB
    assert (got == want).mean() >= MIN_SAME
    assert np.abs(real / lsb - got).max() <= 0.5 + 1e-3  # rounding only (no logit saturates)
    # the widened grids matter: the file's weights (no headroom) give another forward
    plain = build_quant(import_model(world["model"], world["opts"]), "bias", world["opts"])
    assert any(not np.array_equal(a["w"], b["w"])
               for a, b in zip(quant["layers"], plain["layers"], strict=True))
