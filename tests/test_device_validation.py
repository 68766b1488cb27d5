"""The device trusts no train frame: a label outside 0..classes-1, or a float sample with NaN
or an infinity, in a frame with a valid CRC gets an error reply and changes nothing, on the
host build compiled with AddressSanitizer and UndefinedBehaviorSanitizer (where an
out-of-range label used to read past the logits) and on the STM32F746's QEMU twin."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests import sanitize  # noqa: E402
from tests.torch_models import MLP, export  # noqa: E402
from tinytrain.device.link.transport import LinkError  # noqa: E402
from tinytrain.device.runner import HostProgram, open_program  # noqa: E402

BAD_LABELS = (10, -1, 1048576, -2147483648, 2147483647)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlp")
    torch.manual_seed(0)
    return export(MLP(), d / "mlp.onnx")


def _refuses_bad_labels(prog) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 64).astype(np.float32)
    before = prog.get_params()
    steps = prog.device_stats()["steps"]
    for label in BAD_LABELS:
        with pytest.raises(LinkError, match="argument out of range"):
            prog.train_full(x, np.array([label], np.int32))
    after = prog.get_params()
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)
    for bad in (np.nan, np.inf, -np.inf):  # a float sample that is not finite
        xb = x.copy()
        xb[7] = bad
        with pytest.raises(LinkError, match="inputs must be finite"):  # the host refuses
            prog.train_full(xb, np.array([3], np.int32))
        with pytest.raises(LinkError, match="argument out of range"):  # so does the device
            prog.request("T", np.array([3], np.int32).tobytes() + xb.tobytes())
        with pytest.raises(LinkError, match="argument out of range"):
            prog.request("I", xb.tobytes())
    assert prog.device_stats()["steps"] == steps
    loss, _, _ = prog.train(x, np.array([3], np.int32))  # the link is still in step
    assert np.isfinite(loss) and loss > 0
    assert any(not np.array_equal(prog.get_params()[k], before[k]) for k in before)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_sanitized_host_build_refuses_out_of_range_labels(mlp, tmp_path, cli):
    out = tmp_path / "host"
    cli("build", mlp, "--out", out, "--lr", "0.05")
    if not sanitize.rebuild(out):
        pytest.skip("this gcc has no sanitizer runtime")
    log = tmp_path / "sanitizer"
    with HostProgram(out, env=sanitize.env(log)) as prog:
        _refuses_bad_labels(prog)
    assert sanitize.reports(log) == ""


@pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")
def test_twin_refuses_out_of_range_labels(mlp, tmp_path, cli):
    out = tmp_path / "stm32"
    cli("build", mlp, "--board", "stm32f746", "--out", out, "--lr", "0.05")
    with open_program(out, qemu=True) as dev:
        _refuses_bad_labels(dev)


def test_reply_timeouts_follow_frame_size_and_measured_pace(mlp, tmp_path, cli):
    """A command not yet measured waits for its bytes at a slow UART's pace (a 192 KB sample
    is not resent every 2 s); once measured, RTT_MARGIN times its slowest clean round trip,
    never less than the base timeout."""
    from tinytrain.device.link import device as d

    out = tmp_path / "host"
    cli("build", mlp, "--out", out, "--lr", "0.05")
    with HostProgram(out, timeout=0.5) as prog:
        assert prog._wait("T", 196_612) >= 196_612 / d.LINE_RATE > 17
        prog.train(np.zeros(64, np.float32), np.array([1], np.int32))
        assert prog._rtt["T"] > 0
        assert prog._wait("T", 196_612) == max(0.5, d.RTT_MARGIN * prog._rtt["T"])
