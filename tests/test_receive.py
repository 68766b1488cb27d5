"""`tinytrain build --receive PLAN`: frozen tensors the device reads in place from flash and the
link replaces (passes/receive.py, firmware/tt_checkpoint.c layout 3, link commands W/X/Y).

On host builds of the digits CNN trained with `tte:n_bias=2` (the classifier and conv2's bias),
receiving what `tte:n_bias=3,idx=2,ratio=0.5` trains besides (the pw conv's weight and bias):

- the device runs the received values as if they were compiled in: its outputs equal
  onnxruntime's on the ONNX model holding them, and its training steps the NumPy reference's
  (tinytrain.ops.interp) on the graph holding them; int8 builds bit for bit;
- the values persist (a checkpoint; a restart boots with them), and a power cut at any point
  of a receive boots with the old values or the new ones, never a mix;
- pieces out of order, an early commit, a save in between, wrong values and plans that cannot
  be received are clear errors that change nothing.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import ROOT
from onnx import numpy_helper

from tinytrain.device.build import build
from tinytrain.device.link.transport import LinkError
from tinytrain.device.runner import HostProgram, load_program_info
from tinytrain.ops.interp import initial_state, run, train
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options, compile_model

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
UPDATE, RECEIVE = "tte:n_bias=2", "tte:n_bias=3,idx=2,ratio=0.5"
OPTS = Options(update=UPDATE, receive=RECEIVE, sgd=SGDConfig(lr=0.05))
# float32 outputs of C kernels against onnxruntime's, summed in other orders
ORT_ATOL = 2e-5
# parameters after a few fp32 steps against the NumPy reference's (other summation orders)
STEP_ATOL = 1e-5


def _digits(n: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images[:n] / 16.0).astype(np.float32)[:, None], d.target[:n]


def _nudged(values: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """New values for received tensors: floats moved by noise, int8 codes and int32 biases by
    a few steps (in range)."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in values.items():
        if v.dtype == np.float32:
            out[k] = (v + rng.normal(0, 0.3, v.shape)).astype(np.float32)
        elif v.dtype == np.int8:
            out[k] = np.clip(v.astype(np.int32) + rng.integers(-20, 21, v.shape), -127,
                             127).astype(np.int8)
        else:
            out[k] = (v + rng.integers(-500, 501, v.shape)).astype(v.dtype)
    return out


def _onnx_with(values: dict[str, np.ndarray], path: Path) -> Path:
    """The digits ONNX with the pw conv's weight and bias replaced (IR (O, 1, 1, I) -> OIHW)."""
    m = onnx.load(str(DIGITS))
    new = {"pw.weight": values["pw_weight"].transpose(0, 3, 1, 2), "pw.bias": values["pw_bias"]}
    for init in m.graph.initializer:
        if init.name in new:
            init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(new[init.name]),
                                                  init.name))
    onnx.save(m, str(path))
    return path


def _ort(model: Path, x: np.ndarray) -> np.ndarray:
    """onnxruntime's outputs of `model`, one sample at a time."""
    sess = ort.InferenceSession(str(model))
    return np.concatenate([sess.run(None, {"x": s[None]})[0] for s in x])


@pytest.fixture(scope="module")
def fp32(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("receive") / "fp32"
    build(DIGITS, out, OPTS)
    return out


def test_the_cli_builds_and_reports_received_tensors(tmp_path, cli) -> None:
    r = cli("build", DIGITS, "--update", UPDATE, "--receive", RECEIVE, "-o", tmp_path / "b")
    assert "received (tte:n_bias=3,idx=2,ratio=0.5): 2 frozen tensors" in r.stdout
    info = load_program_info(tmp_path / "b")
    assert [(e["name"], e["shape"]) for e in info["received"]] == [
        ("pw_weight", [16, 1, 1, 8]), ("pw_bias", [16])]
    assert {t["name"] for t in info["trainable"]} == {"conv2_bias", "fc_weight", "fc_bias"}
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert report["received"]["bytes"] == (16 * 8 + 16) * 4
    assert report["sram_bytes"]["received"] > 0  # pointers and a receive's staging
    plain = tmp_path / "plain"
    cli("build", DIGITS, "--update", UPDATE, "-o", plain)
    # a build that receives must not load a checkpoint of one that does not, nor the reverse
    assert load_program_info(plain)["model_id"] != info["model_id"]
    assert "received" not in json.loads((plain / "report.json").read_text())["sram_bytes"]


def test_received_values_run_as_if_compiled_in_and_persist(fp32, tmp_path) -> None:
    x, y = _digits(12)
    flash = {"TT_FLASH_FILE": str(tmp_path / "flash.bin")}
    with HostProgram(fp32, env=flash) as p:
        start = p.get_received()
        m = onnx.load(str(DIGITS))
        inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
        assert np.array_equal(start["pw_weight"].transpose(0, 3, 1, 2), inits["pw.weight"])
        assert np.array_equal(start["pw_bias"], inits["pw.bias"])
        new = _nudged(start, 1)
        assert p.receive(new) == 1  # the first checkpoint
        got = p.get_received()
        assert all(np.array_equal(got[k], new[k]) for k in new)
        out = np.stack([p.infer(s) for s in x])
        want = _ort(_onnx_with(new, tmp_path / "new.onnx"), x)
        np.testing.assert_allclose(out.reshape(want.shape), want, atol=ORT_ATOL)
        assert not np.allclose(out.reshape(want.shape), _ort(DIGITS, x), atol=1e-3)

        # training runs the received values too: the NumPy reference with them in its graph
        g, _ = compile_model(DIGITS, OPTS)
        env = initial_state(g)
        env.update(new)
        pending = 0
        for s, t in zip(x[:4], y[:4], strict=True):
            p.train(s, np.array([t]))
            _, pending = train(g, env, s.transpose(1, 2, 0), np.array([t]), pending)
        params = p.get_params()
        for name, v in params.items():
            np.testing.assert_allclose(v, env[name], atol=STEP_ATOL, err_msg=name)
        trained = p.read_param_bytes()
    with HostProgram(fp32, env=flash) as p:  # a restart boots with the received values
        assert p.device_stats()["boot_checkpoint"] == 1
        got = p.get_received()
        assert all(np.array_equal(got[k], new[k]) for k in new)
        assert p.read_param_bytes() != trained  # the checkpoint is from the receive
        again = np.stack([p.infer(s) for s in x])
        np.testing.assert_array_equal(again, out)
        p.reset()  # back to the build: compiled-in values until the next load
        assert all(np.array_equal(v, start[k]) for k, v in p.get_received().items())
        assert p.restore() == 1
        assert all(np.array_equal(v, new[k]) for k, v in p.get_received().items())


def test_int8_received_codes_run_bit_for_bit(tmp_path) -> None:
    x, y = _digits(40)
    np.savez(tmp_path / "calib.npz", x=x)
    opts = replace(OPTS, quantize="int8", calib=tmp_path / "calib.npz")
    build(DIGITS, tmp_path / "q", opts)
    g, _ = compile_model(DIGITS, opts)
    info = load_program_info(tmp_path / "q")
    assert [e["dtype"] for e in info["received"]] == ["s8", "s32"]
    # the received weight got the trained weights' room to grow (the classes that train it)
    assert "pw_weight" in info["weight_headroom"]["weights"]
    with HostProgram(tmp_path / "q") as p:
        new = _nudged(p.get_received(), 2)
        p.receive(new)
        env = initial_state(g)
        env.update(new)
        xin = g.t(g.inputs[0])
        out_name = g.meta.get("infer_output") or g.outputs[0]
        q = g.t(out_name).quant
        for s in x[:6]:
            codes = p.encode_input(s)
            run(g, env, {xin.name: np.frombuffer(codes, np.int8).reshape(xin.shape)},
                phases=("forward",))
            logits = q.scale[0] * (env[out_name].astype(np.float32) - q.zero_point[0])
            e = np.exp(logits - logits.max())
            np.testing.assert_allclose(p.infer(s), (e / e.sum()).reshape(-1), rtol=1e-6,
                                       atol=1e-7)
        pending = 0
        for s, t in zip(x[:3], y[:3], strict=True):
            p.train(s, np.array([t]))
            _, pending = train(g, env, s.transpose(1, 2, 0), np.array([t]), pending)
        for name, v in p.get_params().items():
            np.testing.assert_array_equal(v, env[name], err_msg=name)


def test_a_power_cut_during_a_receive_boots_old_or_new(fp32, tmp_path) -> None:
    flash = tmp_path / "flash.bin"
    with HostProgram(fp32, env={"TT_FLASH_FILE": str(flash)}) as p:
        old = _nudged(p.get_received(), 3)
        p.receive(old)
        new = _nudged(old, 4)
    base = flash.read_bytes()
    slot = len(base) // 2
    seen = set()
    for cut in (1, slot // 2, slot - 1, slot, slot + 1, slot + 300, slot + 700, slot + 900,
                slot + 2000, slot + 4000, slot + 4100):
        flash.write_bytes(base)
        with HostProgram(fp32, env={"TT_FLASH_FILE": str(flash),
                                    "TT_FLASH_CUT_AFTER": str(cut)}) as p:
            try:
                p.receive(new)
                finished = True
            except LinkError:
                finished = False  # the power went out mid-receive
        with HostProgram(fp32, env={"TT_FLASH_FILE": str(flash)}) as p:
            got = p.get_received()
            is_old = all(np.array_equal(got[k], old[k]) for k in old)
            is_new = all(np.array_equal(got[k], new[k]) for k in new)
            assert is_old or is_new, f"a cut after {cut} bytes booted a mix"
            assert not finished or is_new
            seen.add(is_new)
    assert seen == {False, True}


def test_out_of_order_pieces_and_early_commits_change_nothing(fp32) -> None:
    with HostProgram(fp32) as p:
        start = p.get_received()
        raw = b"".join(v.tobytes() for v in _nudged(start, 5).values())
        x, _ = _digits(1)
        before = p.infer(x[0])
        with pytest.raises(LinkError, match="out of order"):
            p.request("W", struct.pack("<I", 32) + raw[32:64])  # nothing open
        with pytest.raises(LinkError, match="off a 32-byte boundary"):
            p.request("W", struct.pack("<I", 0) + raw[:100])  # ends inside pw_weight
        p.request("W", struct.pack("<I", 0) + raw[:96])
        with pytest.raises(LinkError, match="out of order"):
            p.request("W", struct.pack("<I", 128) + raw[128:160])  # a gap
        with pytest.raises(LinkError, match="before all of them arrived"):
            p.request("X")
        p.request("W", struct.pack("<I", 96) + raw[96:192])
        p.checkpoint()  # a save takes the slot the receive was writing: it is closed
        with pytest.raises(LinkError, match="out of order"):
            p.request("W", struct.pack("<I", 192) + raw[192:224])
        with pytest.raises(LinkError, match="before all of them arrived"):
            p.request("X")
        assert all(np.array_equal(v, start[k]) for k, v in p.get_received().items())
        np.testing.assert_array_equal(p.infer(x[0]), before)


def test_wrong_values_are_refused_by_name(fp32, tmp_path) -> None:
    with HostProgram(fp32) as p:
        good = p.get_received()
        cases = [({**good, "fc_weight": good["pw_bias"]}, "fc_weight: not a received tensor"),
                 ({"pw_weight": good["pw_weight"]}, "no values for received tensor 'pw_bias'"),
                 ({**good, "pw_bias": good["pw_bias"][:8]}, r"'pw_bias' has shape \[8\]"),
                 ({**good, "pw_bias": np.full(16, np.nan)}, "must hold finite numbers")]
        for values, msg in cases:
            with pytest.raises(LinkError, match=msg):
                p.receive(values)
        assert p.device_stats()["boot_checkpoint"] == 0xFFFFFFFF
    build(DIGITS, tmp_path / "plain", Options(update=UPDATE))
    with HostProgram(tmp_path / "plain") as p:
        assert p.get_received() == {}
        with pytest.raises(LinkError, match="build it with --receive PLAN"):
            p.receive(good)


def test_a_weight_trained_in_part_cannot_receive_its_rest(tmp_path, cli) -> None:
    r = cli("build", DIGITS, "--update", "tte:n_bias=2,idx=2,ratio=0.25", "--receive", RECEIVE,
            "-o", tmp_path / "b", check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert ("layer 2 (pw) trains input channels 0-1 of its weight here and input channels 0-3"
            in r.stderr)
    assert not (tmp_path / "b").exists()
    # the same channels in both plans are fine: nothing of that weight is received
    cli("build", DIGITS, "--update", "tte:n_bias=2,idx=2,ratio=0.5", "--receive", RECEIVE,
        "-o", tmp_path / "same")
    assert [e["name"] for e in load_program_info(tmp_path / "same")["received"]] == []


@pytest.mark.slow
def test_a_board_runs_and_keeps_received_values_on_its_twin(fp32, tmp_path) -> None:
    """The STM32F746's firmware on its QEMU twin: the received values stream into its flash
    slot, the model runs them (as the host build does), and a reboot keeps them."""
    from tinytrain.device.runner import open_program

    fw = tmp_path / "f746"
    build(DIGITS, fw, replace(OPTS, board="stm32f746"))
    report = json.loads((fw / "report.json").read_text())
    assert report["checkpoint"]["received"] == (16 * 8 + 16) * 4  # both 16-byte multiples
    x, _ = _digits(6)
    with HostProgram(fp32) as p:
        new = _nudged(p.get_received(), 6)
        p.receive(new)
        host = np.stack([p.infer(s) for s in x])
    with open_program(fw, qemu=True) as p:
        assert p.device.received_bytes == report["received"]["bytes"]
        seq = p.receive(new)
        np.testing.assert_allclose(np.stack([p.infer(s) for s in x]), host, atol=ORT_ATOL)
    with open_program(fw, qemu=True) as p:  # power on: the boot loads the receive's slot
        assert p.device_stats()["boot_checkpoint"] == seq
        got = p.get_received()
        assert all(np.array_equal(got[k], new[k]) for k in new)
        np.testing.assert_allclose(np.stack([p.infer(s) for s in x]), host, atol=ORT_ATOL)


@pytest.mark.slow
def test_receiving_is_clean_under_sanitizers(fp32, tmp_path) -> None:
    """The receive's C paths (pieces across tensor ends, an abandoned receive, a commit, a
    reboot from the slot) under AddressSanitizer and UndefinedBehaviorSanitizer."""
    import shutil

    from tests import sanitize

    san = tmp_path / "san"
    shutil.copytree(fp32, san)
    if not sanitize.rebuild(san):
        pytest.skip("this gcc has no sanitizer runtime")
    log = tmp_path / "san.log"
    env = {**sanitize.env(log), "TT_FLASH_FILE": str(tmp_path / "flash.bin")}
    x, y = _digits(3)
    with HostProgram(san, env=env) as p:
        new = _nudged(p.get_received(), 7)
        raw = b"".join(v.tobytes() for v in new.values())
        p.request("W", struct.pack("<I", 0) + raw[:64])  # abandoned by the save below
        p.checkpoint()
        p.chunk = 100  # pieces of 96 bytes: across the end of a tensor, and its tail
        p.receive(new)
        for s, t in zip(x, y, strict=True):
            p.train(s, np.array([t]))
    with HostProgram(san, env=env) as p:
        got = p.get_received()
        assert all(np.array_equal(got[k], new[k]) for k in new)
        p.infer(x[0])
    assert sanitize.reports(log) == ""


@pytest.mark.slow
def test_update_auto_chooses_among_plans_that_can_receive(tmp_path, cli) -> None:
    """--update auto with --receive: plans that train the pw weight in part (which could not
    receive the rest of it) are ruled out with the reason; the choice receives the rest."""
    x, y = _digits(150)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    cli("build", DIGITS, "--update", "auto", "--max-sram", "9", "--data", tmp_path / "d.npz",
        "--receive", RECEIVE, "-o", tmp_path / "a")
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["received"]["tensors"]  # the choice receives what it does not train
    sizes = json.loads((tmp_path / "a" / "autoplan.json").read_text())["memory"]
    ruled_out = {k for k, v in sizes.items() if "cannot receive the rest" in (v["why"] or "")}
    assert "tte:n_bias=2,idx=2,ratio=0.25" in ruled_out  # trains 2 of the 4 pw channels
    assert all(",idx=2,ratio=" in k and "ratio=0.5" not in k and "ratio=1" not in k
               for k in ruled_out)
