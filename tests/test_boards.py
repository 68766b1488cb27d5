"""The Cortex-M boards end to end: the parity models built with arm-none-eabi-gcc for both
boards, trained on their QEMU twins over the serial link and compared with the host build;
flashing the built firmware through both bootloader simulators; checkpoints over the link;
linked sizes in report.json; a model too big for the board refused before any compiler runs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.sim.nrf_dfu_bootloader import NrfDfuBootloader  # noqa: E402
from tests.sim.stm32_rom_bootloader import Stm32RomBootloader  # noqa: E402
from tests.torch_models import MLP, DigitsCNN, OpsMix, TinyMobileNet, export  # noqa: E402
from tinytrain.device.flashing import load_elf  # noqa: E402
from tinytrain.device.runner import HostProgram, open_program  # noqa: E402
from tinytrain.device.state_file import read as read_saved  # noqa: E402

needs_arm = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")
pytestmark = needs_arm

BOARDS = ("stm32f746", "nrf52840")
MODELS = {"mlp": MLP, "cnn": DigitsCNN, "mobilenet_se": TinyMobileNet, "ops_mix": OpsMix}
STEPS = 24  # training steps compared (the issue asks for >= 20)
# Host (glibc) and twin (newlib) differ only in expf/logf/tanhf, by an ulp or two; the issue's
# bar is 1e-5 and we measure about 1e-7 relative on the losses.
LOSS_RTOL = 1e-5
# Parameters after 24 steps: the same ulp-level libm differences, carried through SGD.
PARAM_ATOL = 1e-5
# Linked static SRAM minus the plan: newlib's reentrancy struct (.data, ~1.1 KB, pulled in by
# libm's errno) and the link's few counters. Everything else must be planned.
UNPLANNED_SRAM = 2048


def _data(model_cls, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, *model_cls.input_shape)).astype(np.float32)
    return x, rng.integers(0, 10, n).astype(np.int32)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    out = {}
    for name, cls in MODELS.items():
        torch.manual_seed(1)
        out[name] = export(cls(), d / f"{name}.onnx")
    return out


def _build(cli, model, board, out, *extra):
    cli("build", model, "--board", board, "--out", out, "--lr", "0.05", *extra)
    return out


def _run(prog, x, y):
    losses = [prog.train(xi, yi)[0] for xi, yi in zip(x, y, strict=True)]
    return np.array(losses), prog.get_params()


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_twin_trains_like_the_host(name, board, models, tmp_path, cli):
    """The issue's Done-when 1: -Wall -Wextra -Werror builds for the board, >= 20 steps on the
    QEMU twin over the serial link, losses and read-back parameters match the host build."""
    host = _build(cli, models[name], "host", tmp_path / "host")
    fw = _build(cli, models[name], board, tmp_path / board)
    assert (fw / "firmware.elf").exists() and (fw / "firmware_qemu.elf").exists()
    x, y = _data(MODELS[name], STEPS)
    with HostProgram(host) as p:
        assert p.device.board == "host"
        want_loss, want_params = _run(p, x, y)
    with open_program(fw, qemu=True) as p:
        assert p.device.board == board
        got_loss, got_params = _run(p, x, y)
        assert p.device_stats()["steps"] == STEPS
        assert p.stats.resends == 0  # a clean link needs no retry
    np.testing.assert_allclose(got_loss, want_loss, rtol=LOSS_RTOL)
    assert want_loss[-1] != want_loss[0]  # it did train
    for k, v in want_params.items():
        np.testing.assert_allclose(got_params[k], v, atol=PARAM_ATOL, err_msg=k)


def test_adam_on_the_twin_trains_like_the_host(models, tmp_path, cli):
    """--optimizer adam with the fleet's correction term: the M4F's single-precision Adam
    (squares, square roots, the bias corrections by squaring) is the host's, to libm's ulps."""
    extra = ("--optimizer", "adam", "--fleet-correction", "--update", "last:2", "--batch", "2")
    host = _build(cli, models["cnn"], "host", tmp_path / "host", *extra)
    fw = _build(cli, models["cnn"], "nrf52840", tmp_path / "fw", *extra)
    x, y = _data(DigitsCNN, STEPS)
    with HostProgram(host) as p:
        want_loss, want_params = _run(p, x, y)
    with open_program(fw, qemu=True) as p:
        got_loss, got_params = _run(p, x, y)
    np.testing.assert_allclose(got_loss, want_loss, rtol=LOSS_RTOL)
    assert want_loss[-1] != want_loss[0]
    for k, v in want_params.items():
        np.testing.assert_allclose(got_params[k], v, atol=PARAM_ATOL, err_msg=k)


@pytest.fixture(scope="module")
def stm32_mlp(models, tmp_path_factory):
    from tests.conftest import tinytrain

    return _build(tinytrain, models["mlp"], "stm32f746", tmp_path_factory.mktemp("b") / "fw")


def test_report_has_linked_sizes(stm32_mlp):
    r = json.loads((stm32_mlp / "report.json").read_text())
    fw, s = r["firmware"], r["sram_bytes"]
    assert fw["text"] > 0 and fw["flash_used"] <= 512 * 1024
    assert fw["stack_reserved"] >= s["stack"] > 0
    assert 0 < fw["stack_estimate"] <= fw["stack_reserved"]
    assert fw["stack_chain"][0] == "main"
    # the plan accounts for every byte the linker reserves, but libc's own static data
    assert s["total"] <= fw["sram_used"] <= s["total"] + UNPLANNED_SRAM, (s, fw)
    assert s["link_buffers"] > 64 * 4  # a whole 64-float sample fits the receive buffer


def test_stack_estimate_follows_the_builds_pointer_calls(stm32_mlp):
    """The link's row reader, handed to the model as its input callback, is a target of the
    model's pointer call; the link's server, whose switch table lies in its own section, is
    not one (tests/test_stack_estimate.py has the rule on a small program)."""
    from tinytrain.device.firmware_size import address_taken, stack_depth

    objs = stm32_mlp / "su" / "board"
    targets = address_taken(objs, "arm-none-eabi-readelf")
    assert "link_rows" in targets and "tt_link_serve" not in targets
    s = stack_depth(objs, indirect_targets=targets)
    assert not any("recursive" in f for f in s["chain"])
    r = json.loads((stm32_mlp / "report.json").read_text())["firmware"]
    assert r["stack_estimate"] == s["bytes"] >= stack_depth(objs)["bytes"]


def test_firmware_build_needs_qemu_or_port(stm32_mlp, cli):
    p = cli("run", stm32_mlp, "--data", stm32_mlp / "program.json", check=False)
    assert p.returncode == 2 and "--qemu" in p.stderr and "Traceback" not in p.stderr


def test_run_cli_on_the_twin(stm32_mlp, tmp_path, cli):
    x, y = _data(MLP, 30, seed=3)
    np.savez(tmp_path / "d.npz", x=x.reshape(30, 64), y=y)
    p = cli("run", stm32_mlp, "--qemu", "--data", tmp_path / "d.npz", "--epochs", "2",
            "--eval", tmp_path / "d.npz", "--save", tmp_path / "s.npz", "--checkpoint")
    assert "epoch 2" in p.stdout and "checkpoint 1 written" in p.stdout
    info = json.loads((stm32_mlp / "program.json").read_text())
    saved = read_saved(tmp_path / "s.npz")
    assert set(saved.params) == {t["name"] for t in info["trainable"]}
    assert set(saved.state) == {e["name"] for e in info["state"]}


def test_checkpoint_restores_on_the_twin(stm32_mlp):
    from tinytrain.device.qemu import erase_flash

    x, y = _data(MLP, 5)
    erase_flash(stm32_mlp)  # the twin's flash persists: forget test_run_cli_on_the_twin's
    with open_program(stm32_mlp, qemu=True) as p:
        assert p.restore() is None  # fresh flash: nothing to load
        _run(p, x, y)
        trained = p.read_param_bytes()
        assert p.checkpoint() == 1
        _run(p, x, y)
        assert p.checkpoint() == 2  # the other slot
        p.reset()
        assert p.read_param_bytes() != trained
        assert p.restore() == 2
        again = p.read_param_bytes()
        assert again != trained  # slot 2 holds the later parameters
        assert p.device_stats()["boot_checkpoint"] == 0xFFFFFFFF


def test_checkpoint_survives_a_restart_of_the_host_build(models, tmp_path, cli):
    build = _build(cli, models["mlp"], "host", tmp_path / "h")
    env = {"TT_FLASH_FILE": str(tmp_path / "flash.bin")}
    x, y = _data(MLP, 6)
    with HostProgram(build, env=env) as p:
        _run(p, x, y)
        saved = p.read_param_bytes()
        assert p.checkpoint() == 1
    with HostProgram(build, env=env) as p:  # "power on": the boot loads the newest slot
        assert p.device_stats()["boot_checkpoint"] == 1
        assert p.read_param_bytes() == saved


def test_power_cut_during_a_checkpoint_boots_old_or_new(models, tmp_path, cli):
    """The real host firmware, killed at points across a checkpoint write (erase + program);
    tests/test_checkpoint.py cuts at every byte in a C harness."""
    from tinytrain.device.link.transport import LinkError

    build = _build(cli, models["mlp"], "host", tmp_path / "h")
    flash = tmp_path / "flash.bin"
    x, y = _data(MLP, 4)
    with HostProgram(build, env={"TT_FLASH_FILE": str(flash)}) as p:
        _run(p, x[:2], y[:2])
        old = p.read_param_bytes()
        p.checkpoint()
        _run(p, x[2:], y[2:])
        new = p.read_param_bytes()
    base = flash.read_bytes()
    slot = len(base) // 2
    seen = set()
    for cut in [1, slot // 2, slot - 1, slot, slot + 1, slot + 100, slot + 5000, slot + 9000,
                slot + 9600, slot + 9700]:
        flash.write_bytes(base)
        env = {"TT_FLASH_FILE": str(flash), "TT_FLASH_CUT_AFTER": str(cut)}
        with HostProgram(build, env=env) as p:
            p.write_param_bytes(new)
            try:
                p.checkpoint()
                finished = True
            except LinkError:
                finished = False  # the power went out mid-write
        with HostProgram(build, env={"TT_FLASH_FILE": str(flash)}) as p:
            got = p.read_param_bytes()
            assert got in (old, new), f"cut after {cut} bytes booted a mix"
            seen.add(got == new)
            if finished:
                assert got == new
    assert seen == {False, True}


def test_too_big_for_the_board_is_the_linkers_verdict_explained(tmp_path, cli):
    """940 KB of frozen weights in one array cannot fit the STM32F746's largest program region
    (896 KB once the checkpoint slots take two 32 KB sectors): the linker says so, the build
    explains where the bytes go in both memories, and nothing is written."""
    big = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 300),
                              torch.nn.ReLU(), torch.nn.Linear(300, 10))
    big.input_shape = (1, 28, 28)
    model = export(big, tmp_path / "big.onnx")
    p = cli("build", model, "--board", "stm32f746", "--out", tmp_path / "o", "--update", "bias",
            check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    err = " ".join(p.stderr.split())
    assert "does not fit stm32f746" in err and "the linker's verdict" in err, err
    assert "flash" in err and "code" in err and "constants" in err and "checkpoint" in err
    assert "for flash:" in err and "for SRAM:" not in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()  # nothing written


class WideInput(torch.nn.Module):
    """Activations that grow by a fixed number of bytes per input row, weights that do not:
    moves the firmware's static SRAM to any point near the board's limit."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.input_shape = (1, rows, 64)
        self.body = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Conv2d(1, 2, 1),
                                        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                        torch.nn.Flatten(), torch.nn.Linear(2, 10))

    def forward(self, x):
        return self.body(x)


# How close to the 320 KB limit the two near-edge builds land (rows of 512 B of activations).
EDGE_BYTES = 2048


def test_fit_verdict_near_the_sram_edge_each_way(tmp_path, cli):
    """Two builds either side of the STM32F746's 320 KB, a few KB from the edge: the one under
    links and reports static SRAM within the board; the one over is refused for SRAM, with the
    breakdown and SRAM advice. The build's verdict is the linker's, so no planner estimate can
    pass a build that overflows or refuse one that fits."""
    from tinytrain.device.build import build
    from tinytrain.passes.pipeline import Options

    def sram(rows: int) -> int:
        model = export(WideInput(rows), tmp_path / f"w{rows}.onnx")
        return build(model, tmp_path / f"w{rows}", Options(board="stm32f746", update="bias"))[
            "firmware"]["sram_used"]

    limit = 320 * 1024
    a, b = sram(64), sram(128)
    per_row = (b - a) / 64
    assert per_row > 0
    under = 64 + int((limit - EDGE_BYTES - a) // per_row)
    over = 64 + int((limit + EDGE_BYTES - a) // per_row) + 1
    used = sram(under)
    assert limit - 2 * EDGE_BYTES <= used <= limit, (under, used)
    model = export(WideInput(over), tmp_path / "over.onnx")
    p = cli("build", model, "--board", "stm32f746", "--out", tmp_path / "o", "--update", "bias",
            check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    err = " ".join(p.stderr.split())
    assert "does not fit stm32f746" in err and "RAM" in err and "for SRAM:" in err, err
    assert "for flash:" not in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("board,sim_cls", [("stm32f746", Stm32RomBootloader),
                                           ("nrf52840", NrfDfuBootloader)])
def test_flash_cli_round_trip(board, sim_cls, models, tmp_path, cli):
    fw = _build(cli, models["mlp"], board, tmp_path / "fw")
    with sim_cls() as sim:
        p = cli("flash", fw, "--port", sim.port)
        assert "verified" in p.stdout
        for addr, data in load_elf(fw / "firmware.elf"):
            assert bytes(sim.flash_at(addr, len(data)) if hasattr(sim, "flash_at")
                         else sim.flash[addr:addr + len(data)]) == data


def test_flash_cli_errors(stm32_mlp, tmp_path, cli):
    p = cli("flash", stm32_mlp, check=False)
    assert p.returncode == 2 and "--port" in p.stderr
    with Stm32RomBootloader(pid=0x451) as sim:  # an STM32F76x answers: wrong chip
        p = cli("flash", stm32_mlp, "--port", sim.port, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "0x451" in p.stderr
