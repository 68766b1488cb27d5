"""Checkpoints carry the training state: a device that loses power goes on as the run it
was. On real host builds (the flash a file, power cuts injected with TT_FLASH_CUT_AFTER):

- trained part way (mid-batch at batch 4), checkpointed, powered off and booted again, a
  device ends the rest of its samples with the bits of one never powered off: parameters,
  momentum, pending accumulators, int8 shadows and the rounding's step counter;
- a power cut anywhere in such a checkpoint boots with the old parameters *and* state or the
  new ones, never a mix;
- the build reports what a checkpoint holds and the slots it needs.
(tests/test_checkpoint.py cuts at every byte of the layout in a C harness.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from tinytrain.device.build import build
from tinytrain.device.link.device import table_bytes
from tinytrain.device.link.transport import LinkError
from tinytrain.device.runner import HostProgram
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the host build needs gcc")

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
SAMPLES, CUT_AT = 24, 13  # 13 = 3 batches of 4 and one pending sample
PLANS = {
    "fp32 momentum batch 4": {"sgd": SGDConfig(lr=0.01, momentum=0.9, batch=4)},
    "int8 stochastic": {"update": "last:3", "quantize": "int8",
                        "sgd": SGDConfig(lr=0.01, rounding="stochastic")},
    "int8 shadow": {"update": "last:3", "quantize": "int8",
                    "sgd": SGDConfig(lr=0.01, rounding="shadow")},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = tmp_path_factory.mktemp("ckstate")
    digits = load_digits()
    x = (digits.images[:SAMPLES] / 16.0).astype(np.float32)[:, :, :, None]  # NHWC
    np.savez(d / "calib.npz", x=x.transpose(0, 3, 1, 2))
    return d, x, digits.target[:SAMPLES]


def _build(d: Path, name: str) -> Path:
    out = d / name.replace(" ", "_")
    if not out.exists():
        build(DIGITS, out, Options(calib=d / "calib.npz", **PLANS[name]))
    return out


def _everything(p) -> dict[str, np.ndarray]:
    state = p.get_state()
    assert state is not None
    return {**p.get_params(), **{f"state/{k}": v for k, v in state.items()}}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_a_device_powered_off_after_a_checkpoint_goes_on_as_it_was(data, name) -> None:
    d, x, y = data
    b = _build(d, name)
    with HostProgram(b, env={"TT_FLASH_FILE": str(d / f"{b.name}_whole.bin")}) as p:
        for i in range(SAMPLES):
            p.train(x[i], y[i])
        want = _everything(p)
    flash = d / f"{b.name}_cut.bin"
    with HostProgram(b, env={"TT_FLASH_FILE": str(flash)}) as p:
        for i in range(CUT_AT):
            p.train(x[i], y[i])
        at_cut = _everything(p)
        assert p.checkpoint() == 1
    with HostProgram(b, env={"TT_FLASH_FILE": str(flash)}) as p:  # power on: the boot loads it
        assert p.device_stats()["boot_checkpoint"] == 1
        assert _same(_everything(p), at_cut)
        for i in range(CUT_AT, SAMPLES):
            p.train(x[i], y[i])
        got = _everything(p)
    assert _same(got, want)
    info = json.loads((b / "program.json").read_text())
    if info["sgd"]["batch"] > 1:
        assert int(at_cut["state/pending_samples"][0]) == CUT_AT % 4


def test_a_power_cut_in_a_checkpoint_boots_old_or_new_state(data) -> None:
    d, x, y = data
    b = _build(d, "int8 shadow")
    flash = d / "cuts.bin"
    with HostProgram(b, env={"TT_FLASH_FILE": str(flash)}) as p:
        for i in range(5):
            p.train(x[i], y[i])
        old = _everything(p)
        p.checkpoint()
        for i in range(5, 9):
            p.train(x[i], y[i])
        new = _everything(p)
    params = {k: v for k, v in new.items() if not k.startswith("state/")}
    state = {k[len("state/"):]: v for k, v in new.items() if k.startswith("state/")}
    base = flash.read_bytes()
    slot = len(base) // 2
    info = json.loads((b / "program.json").read_text())
    used = 32 + sum(-(-table_bytes([e]) // 4) * 4 for e in info["trainable"] + info["state"])
    seen = set()  # the save erases the whole slot, then programs `used` bytes
    for cut in [1, slot // 2, slot, slot + 1, slot + 40, slot + used // 2, slot + used - 5,
                slot + used - 1, slot + used + 16]:
        flash.write_bytes(base)
        env = {"TT_FLASH_FILE": str(flash), "TT_FLASH_CUT_AFTER": str(cut)}
        with HostProgram(b, env=env) as p:
            p.set_params(params)
            p.set_state(state)
            try:
                p.checkpoint()
                finished = True
            except LinkError:
                finished = False  # the power went out mid-write
        with HostProgram(b, env={"TT_FLASH_FILE": str(flash)}) as p:
            got = _everything(p)
        assert _same(got, old) or _same(got, new), f"cut after {cut} bytes booted a mix"
        seen.add(_same(got, new))
        if finished:
            assert _same(got, new)
    assert seen == {False, True}


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="needs arm-none-eabi-gcc")
def test_slots_for_the_state_give_way_to_a_program_that_needs_the_flash(tmp_path) -> None:
    """On the nRF52840 (892 KB of flash below the bootloader): 439 KB of frozen weights and
    62 KB trained with momentum at batch 4 (124 KB of state). Slots that hold the state too
    (2 x 188 KB) leave the program too little flash; the build links with slots for the
    parameters alone, says so, and the twin's layout agrees."""
    import torch

    from tests.torch_models import export
    from tinytrain.boards import load_board
    from tinytrain.codegen.render import flash_layout_of_project

    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 140), torch.nn.ReLU(),
                              torch.nn.Linear(140, 110), torch.nn.ReLU(),
                              torch.nn.Linear(110, 10))
    net.input_shape = (1, 28, 28)
    model = export(net, tmp_path / "wide.onnx")
    sgd = SGDConfig(lr=0.01, momentum=0.9, batch=4)
    small = build(DIGITS, tmp_path / "small", Options(board="nrf52840", sgd=sgd))
    assert small["checkpoint"]["with_state"]  # where the flash has room, the state is kept
    r = build(model, tmp_path / "wide", Options(board="nrf52840", update="last:2", sgd=sgd))
    c = r["checkpoint"]
    assert not c["with_state"] and c["state"] == 0 and c["bytes"] <= c["slot"]
    assert c["slot"] < c["params"] + 2 * c["params"]  # too small for the state
    assert r["flash_bytes"]["checkpoint_slot"] == c["slot"]
    assert json.loads((tmp_path / "wide" / "program.json").read_text())["checkpoint_state"] \
        is False
    lay = flash_layout_of_project(tmp_path / "wide", load_board("nrf52840"))
    assert lay.slot_bytes == c["slot"] and not lay.with_state
