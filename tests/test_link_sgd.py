"""The SGD scalars over the serial link (the `O` command, `OnlineModel.sgd`, `run --lr`): a rate
set on a running program trains exactly as a build at that rate does, on the host and on the
STM32F746 twin; the device itself refuses values out of range and ones the build cannot use,
and then changes nothing."""

from __future__ import annotations

import shutil
import struct

import numpy as np
import pytest

import tinytrain
from tests.library_helpers import DIGITS_ONNX, STEPS, build, digits
from tinytrain.device.link.transport import LinkError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
SHAPE = (1, 8, 8)  # one digit in the ONNX model's own layout (NCHW without N)
# Host (glibc) and twin (newlib) expf/logf differ by an ulp or two: the boards' tests measure
# about 1e-7 relative over 24 steps
LIBM_RTOL = 1e-5


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    d = tmp_path_factory.mktemp("sgd")
    x, y = digits(STEPS, SHAPE)
    np.savez(d / "train.npz", x=x, y=y)
    np.savez(d / "calib.npz", x=digits(64, SHAPE, start=STEPS)[0])
    q8 = ("--quantize", "int8", "--calib", str(d / "calib.npz"), "--update", "last:2")
    return {"dir": d, "x": x, "y": y,
            "m05": build(DIGITS_ONNX, d / "m05", "--lr", "0.05", "--momentum", "0.9"),
            "m10": build(DIGITS_ONNX, d / "m10", "--lr", "0.1", "--momentum", "0.9"),
            "plain": build(DIGITS_ONNX, d / "plain", "--lr", "0.05"),
            "q05": build(DIGITS_ONNX, d / "q05", "--lr", "0.05", *q8),
            "q10": build(DIGITS_ONNX, d / "q10", "--lr", "0.1", *q8)}


def _trained(model: tinytrain.OnlineModel, x: np.ndarray, y: np.ndarray) -> dict:
    for xi, yi in zip(x, y, strict=True):
        model.learn(xi, int(yi))
    return model.params()


def _assert_same(got: dict, want: dict, rtol: float = 0.0) -> None:
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=0, err_msg=k)


@pytest.mark.parametrize("start, ref", [("m05", "m10"), ("q05", "q10")],
                         ids=["fp32 momentum", "int8"])
def test_a_rate_set_over_the_link_trains_as_a_build_at_that_rate(builds, start, ref):
    x, y = builds["x"], builds["y"]
    with tinytrain.connect(builds[ref]) as m:
        want = _trained(m, x, y)
    with tinytrain.connect(builds[start]) as m:
        assert m.sgd()["lr"] == np.float32(0.05)
        assert m.sgd(lr=0.1)["lr"] == np.float32(0.1)
        got = _trained(m, x, y)
    _assert_same(got, want)  # bit for bit: the same code reads the same float
    with tinytrain.connect(builds[start]) as m:  # and the build's own rate trains otherwise
        assert any(not np.array_equal(v, want[k]) for k, v in _trained(m, x, y).items())


def test_the_device_refuses_what_the_build_cannot_use_and_changes_nothing(builds):
    with tinytrain.connect(builds["plain"]) as m:
        before = m.sgd()
        assert before == {"lr": np.float32(0.05), "momentum": 0.0, "weight_decay": 0.0}
        with pytest.raises(LinkError, match="refused momentum: not usable by this build"):
            m.sgd(lr=0.2, momentum=0.5)  # no momentum buffers: the lr is not taken either
        assert m.sgd() == before
        # values the host API would pass on: the device checks them itself
        for bad, which in (((np.nan, 0, 0), "lr"), ((-1, 0, 0), "lr"), ((np.inf, 0, 0), "lr"),
                           ((0.1, 1.0, 0), "momentum"), ((0.1, 0, -0.5), "weight_decay"),
                           ((0.1, 0, np.inf), "weight_decay")):
            with pytest.raises(LinkError, match=f"refused {which}: out of range"):
                m.device.request("O", struct.pack("<3f", *bad))
        with pytest.raises(LinkError, match="wrong payload length"):
            m.device.request("O", b"\0" * 8)
        with pytest.raises(LinkError, match="unknown SGD scalar"):
            m.device.sgd(rate=0.1)
        assert m.sgd() == before
        assert m.sgd(lr=0.0, weight_decay=1e-4)["weight_decay"] == np.float32(1e-4)
    with tinytrain.connect(builds["q05"]) as m:
        with pytest.raises(LinkError, match="refused weight_decay: not usable"):
            m.sgd(weight_decay=0.01)
        with pytest.raises(LinkError, match="refused momentum: not usable"):
            m.sgd(momentum=0.9)
        assert m.sgd()["lr"] == np.float32(0.05)


def test_lr_pauses_learning_at_zero(builds):
    with tinytrain.connect(builds["m05"]) as m:
        start = m.params()
        m.sgd(lr=0.0)
        _assert_same(_trained(m, builds["x"], builds["y"]), start)


def test_run_sets_the_scalars_from_the_command_line(builds, cli):
    d = builds["dir"]
    cli("run", builds["m10"], "--data", d / "train.npz", "--save", d / "want.npz")
    r = cli("run", builds["m05"], "--data", d / "train.npz", "--lr", "0.1", "--save",
            d / "got.npz")
    assert "SGD for this run: lr 0.1 (build 0.05)" in r.stdout
    _assert_same(dict(np.load(d / "got.npz")), dict(np.load(d / "want.npz")))
    bad = cli("run", builds["plain"], "--data", d / "train.npz", "--momentum", "0.5",
              check=False)
    assert bad.returncode == 2
    assert "refused momentum: not usable by this build" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None
                    or shutil.which("qemu-system-arm") is None,
                    reason="needs arm-none-eabi-gcc and QEMU")
def test_the_twin_takes_a_rate_over_its_uart(builds, cli):
    """The same command in the STM32F746 firmware, over the twin's UART: the result is the
    host build's at that rate, to libm's ulps."""
    d = builds["dir"]
    fw = build(DIGITS_ONNX, d / "fw", "--board", "stm32f746", "--lr", "0.05", "--momentum",
               "0.9")
    cli("run", builds["m10"], "--data", d / "train.npz", "--save", d / "host10.npz")
    r = cli("run", fw, "--qemu", "--data", d / "train.npz", "--lr", "0.1", "--save",
            d / "twin.npz")
    assert "lr 0.1 (build 0.05)" in r.stdout
    _assert_same(dict(np.load(d / "twin.npz")), dict(np.load(d / "host10.npz")), LIBM_RTOL)
