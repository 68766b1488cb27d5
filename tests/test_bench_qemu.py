"""`tinytrain bench --qemu` figures: instruction counts on the stm32f746 twin under
-icount shift=0 are deterministic, the per-op counters add up to the whole step, and the
counts are plausible against the model's MACs. `tinytrain bench --port` over a serial link to
a twin (no DWT: its hello says so) gives the same instructions, and a board's cycle table
carries the twin's instructions beside them. bench/profile_step.py's trace of a step names
the functions its instructions go to."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from tinytrain.device.bench import (
    AGREEMENT_TOLERANCE,
    _unwrap,
    format_table,
    measure,
    to_json,
    with_twin,
)
from tinytrain.device.trace_profile import UNKNOWN

# Each clock interval may be one tick off: it starts at whatever phase of the 40-instruction
# SysTick tick the UART poll loop left it, which depends on when the host's bytes arrived. The
# step's clock stops while the sample is read (firmware/tt_link.c), so this one-row MLP's step
# is three intervals: the step itself, its input row, and the end-of-frame check.
TICK_JITTER = 3
STEPS = 4


@pytest.fixture(scope="module")
def mlp_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    torch = pytest.importorskip("torch")
    from tests.torch_models import MLP, export
    from tinytrain.device.build import build
    from tinytrain.passes.optimizer import SGDConfig
    from tinytrain.passes.pipeline import Options

    tmp = tmp_path_factory.mktemp("bench_qemu")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx = export(MLP(), tmp / "mlp.onnx")
    build(onnx, tmp / "mlp", Options(board="stm32f746", sgd=SGDConfig(lr=0.05)))
    return tmp / "mlp"


@pytest.fixture(scope="module")
def same_sample(mlp_build: Path) -> dict:
    """Every measured step trains the same sample (from an .npz, the CLI's --data path)."""
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    data = mlp_build.parent / "one.npz"
    np.savez(data, x=np.repeat(x, STEPS, 0), y=np.full(STEPS, 3, np.int64))
    return measure(mlp_build, steps=STEPS, data=data)


def test_counts_are_deterministic(same_sample: dict) -> None:
    # From the initial parameters, the same sample runs the same instructions.
    assert same_sample["repeat"]["spread_ticks"] <= TICK_JITTER, same_sample["repeat"]
    # Trained steps change the parameters, so data-dependent code (expf, ReLU) may move the
    # count a little, but never by more than a few percent of the step.
    s = same_sample["step"]
    assert s["max"] - s["min"] <= 0.01 * s["instructions"], s["ticks"]
    assert s["wrapped_steps"] == 0 and s["skipped_nonfinite"] == 0


def test_ops_add_up_to_the_step(same_sample: dict) -> None:
    c = same_sample["profile_check"]
    assert abs(1 - c["ratio"]) <= AGREEMENT_TOLERANCE, c
    assert c["agrees"]
    assert same_sample["phases"]["glue"] >= 0


def test_every_op_counted_and_plausible(same_sample: dict, mlp_build: Path) -> None:
    ops = same_sample["ops"]
    info = json.loads((mlp_build / "program.json").read_text())
    assert [o["name"] for o in ops] == [o["name"] for o in info["profile_ops"]]
    assert all(o["instructions"] > 0 for o in ops if o["phase"] == "forward"), ops
    assert all(o["instructions"] > 0 for o in ops), ops
    macs = json.loads((mlp_build / "report.json").read_text())["macs"]
    # each multiply-accumulate needs at least one instruction
    assert same_sample["step"]["instructions"] > macs["forward"] + macs["backward"]
    assert same_sample["inference"]["instructions"] > macs["forward"]
    assert same_sample["inference"]["instructions"] < same_sample["step"]["instructions"]
    assert sum(o["share"] for o in ops) == pytest.approx(100 * same_sample["profile_check"]
                                                         ["ratio"])


def test_table_and_json(same_sample: dict) -> None:
    text = format_table(same_sample)
    for phase in {o["phase"] for o in same_sample["ops"]} | {"glue"}:
        assert phase in text
    assert "instructions" in text and "inference" in text and "estimate" in text
    assert json.loads(to_json(same_sample))["step"] == same_sample["step"]


def test_random_samples(mlp_build: Path) -> None:
    res = measure(mlp_build, steps=2, seed=3)
    assert res["samples"] == "random" and len(res["step"]["ticks"]) == 2
    assert res["profile_check"]["agrees"]


def test_unwrap_a_step_longer_than_the_tick_counter() -> None:
    assert _unwrap(1000, 990, 24, 10) == (1000, 0)
    assert _unwrap(1000, 1005, 24, 10) == (1000, 0)  # op readings may each be a tick long
    assert _unwrap(500, (1 << 24) + 400, 24, 10) == ((1 << 24) + 500, 1)
    assert _unwrap(500, (2 << 24) + 400, 24, 10) == ((2 << 24) + 500, 2)


@pytest.fixture(scope="module")
def one_npz(mlp_build: Path) -> Path:
    return mlp_build.parent / "one.npz"


def test_port_to_a_twin_counts_instructions(same_sample: dict, mlp_build: Path, one_npz: Path,
                                            tmp_path: Path, cli) -> None:
    """`bench --port` to a twin whose UART is a socket (as a board on /dev/ttyACM0): the hello
    says the counter is the twin's SysTick, not DWT, so the bench prints instructions only,
    the same as `--qemu` counts for the same samples."""
    from tinytrain.device.qemu import QemuTwin
    from tinytrain.device.runner import load_program_info

    twin = QemuTwin.start(mlp_build, load_program_info(mlp_build), icount=True)
    try:
        out = cli("bench", mlp_build, "--port", twin.url, "--steps", STEPS, "--data", one_npz,
                  "--json", tmp_path / "b.json").stdout
    finally:
        twin.stop()
    res = json.loads((tmp_path / "b.json").read_text())
    assert res["unit"] == "instructions" and not res["on_twin"] and "twin" not in res
    assert "no DWT, so no cycles" in out and "cycles per" not in out
    assert res["machine"] == twin.url
    step, ref = res["step"], same_sample["step"]
    assert abs(step["instructions"] - ref["instructions"]) <= TICK_JITTER * 40, (step, ref)
    assert [o["name"] for o in res["ops"]] == [o["name"] for o in same_sample["ops"]]


def test_cycles_beside_the_twins_instructions(same_sample: dict) -> None:
    """A board's counts are cycles; with the twin's result its table shows both per op."""
    u = "cycles"
    board = {**same_sample, "unit": u, "on_twin": False, "machine": "/dev/ttyACM0",
             "counter": "DWT->CYCCNT, core clock cycles", "per_tick": 1,
             "step": {**{k: v for k, v in same_sample["step"].items() if k != "instructions"},
                      u: 0.8 * same_sample["step"]["instructions"]},
             "inference": {"runs": 1, "counts": "forward ops",
                           u: same_sample["inference"]["instructions"]},
             "ops": [{**{k: v for k, v in o.items() if k != "instructions"},
                      u: 0.8 * o["instructions"]} for o in same_sample["ops"]]}
    text = format_table(with_twin(board, same_sample))
    assert "cycles  (mean" in text and "DWT->CYCCNT" in text
    assert "0.80 cycles per instruction" in text
    assert "ms per step at 216 MHz" in text and "estimate" not in text
    top = text.split("top ")[1].splitlines()
    assert top[1].split()[-1] == "instructions"  # the twin's column
    first = max(same_sample["ops"], key=lambda o: o["instructions"])
    assert f"{round(first['instructions']):,}" in top[2]


def test_bench_needs_one_target(mlp_build: Path, cli) -> None:
    p = cli("bench", mlp_build, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--qemu" in p.stdout + p.stderr and "--port" in p.stdout + p.stderr


ROOT = Path(__file__).resolve().parents[1]

# bench/profile_step.py: the step's own code (the kernels and model.c) cannot exceed the
# firmware's count of the step, read with one SysTick tick (40 instructions) per interval (and
# model.c's boot code, tt_init, is a few hundred more); with the code that has no call-graph
# node (libc, kernels defined in assembly: boot and link calls included) it covers the step.
TICK_SLACK = 1.01
COVER = 0.9


def _profile(build: Path, out: Path) -> dict:
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "profile_step.py"), str(build),
                        "--json", str(out), "--top", "5", "--blocks", "3"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "| function | source | instructions | of the step |" in p.stdout
    return json.loads(out.read_text())


def _own(res: dict) -> dict[str, int]:
    """The step's own code: the kernels and model.c."""
    return {f["function"]: f["instructions"] for f in res["functions"]
            if f["source"].startswith("runtime/") or f["source"] == "model.c"}


def test_profile_step_on_the_twin(mlp_build: Path, tmp_path: Path):
    a = _profile(mlp_build, tmp_path / "a.json")
    step = a["step_instructions"]
    funcs = {f["function"]: f for f in a["functions"]}
    own = sum(_own(a).values())
    other = sum(f["instructions"] for f in a["functions"]
                if f["source"] == UNKNOWN or f["source"].startswith("/"))  # libc's headers
    assert own <= TICK_SLACK * step and own + other >= COVER * step, (own, other, step)
    # the MLP's weight update (ttk_sgd_rows_lr) leads the step's own code
    top = next(f for f in a["functions"] if f["source"].startswith("runtime/"))
    assert top["function"].startswith("ttk_sgd_rows"), top
    # the link's code is named apart from the step's
    assert funcs["frame_byte"]["source"] == "firmware/tt_link.c"
    # a public kernel by its definition, not the header that declares it
    assert funcs["tt_dense_f32_opt"]["source"] == "runtime/tt_f32_opt.c"
    assert a["traced_instructions"] > step
    blocks = a["blocks"]
    assert blocks[0]["instructions"] == blocks[0]["size"] * blocks[0]["runs"]
    assert sum(b["instructions"] for b in blocks) == a["traced_instructions"]
    # under -icount the step's own code runs the same instructions every time (the link's
    # polling loops depend on when the host's bytes arrive)
    assert _own(_profile(mlp_build, tmp_path / "b.json")) == _own(a)
