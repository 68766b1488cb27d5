"""bench/profile_step.py: instructions per function and per block of one training step, from
QEMU's execution trace of a build's twin (tinytrain/device/trace_profile.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tinytrain.device.trace_profile import UNKNOWN, by_function, parse_trace

ROOT = Path(__file__).resolve().parents[1]

# A trace in QEMU's format: block 0x100 (3 instructions, `f`) runs twice, block 0x200 (2,
# `g`) once and is listed again when retranslated, block 0x300 runs without a listing (the
# log began after its translation) and is left out.
TRACE = """\
----------------
IN: f
0x00000100:  4684       mov ip, r0
0x00000102:  4684       mov ip, r0
0x00000104:  d1fa       bne.n 0x100

Trace 0: 0x7f00 [00000000/00000100/00000000/ff020000] f
Trace 0: 0x7f00 [00000000/00000100/00000000/ff020000] f
----------------
IN: g
0x00000200:  4684       mov ip, r0
0x00000202:  4770       bx lr

Trace 0: 0x7f40 [00000000/00000200/00000000/ff020000] g
Trace 0: 0x7f80 [00000000/00000300/00000000/ff020000] h
----------------
IN: g
0x00000200:  4684       mov ip, r0
0x00000202:  4770       bx lr
"""


def test_parse_trace_counts_blocks_and_functions():
    blocks = {b.pc: b for b in parse_trace(TRACE.splitlines())}
    assert set(blocks) == {0x100, 0x200}
    assert (blocks[0x100].size, blocks[0x100].runs, blocks[0x100].function) == (3, 2, "f")
    assert (blocks[0x200].size, blocks[0x200].runs) == (2, 1)
    funcs = by_function(blocks.values(), {"f": "runtime/a.c"})
    assert funcs == [{"function": "f", "source": "runtime/a.c", "instructions": 6},
                     {"function": "g", "source": UNKNOWN, "instructions": 2}]


# The step's own code (the kernels and model.c) cannot exceed the firmware's count of the
# step, read with one SysTick tick (40 instructions) per interval (and model.c's boot code,
# tt_init, is a few hundred more); with the code that has no call-graph node (libc, kernels
# defined in assembly: boot and link calls included) it covers the step.
TICK_SLACK = 1.01
COVER = 0.9


@pytest.fixture(scope="module")
def mlp_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs qemu-system-arm and arm-none-eabi-gcc")
    torch = pytest.importorskip("torch")
    from tests.torch_models import MLP, export
    from tinytrain.device.build import build
    from tinytrain.passes.pipeline import Options

    tmp = tmp_path_factory.mktemp("trace_profile")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx = export(MLP(), tmp / "mlp.onnx")
    build(onnx, tmp / "mlp", Options(board="stm32f746", kernels="optimized"))
    return tmp / "mlp"


def _profile(build: Path, out: Path) -> dict:
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "profile_step.py"), str(build),
                        "--json", str(out), "--top", "5", "--blocks", "3"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "| function | source | instructions | of the step |" in p.stdout
    return json.loads(out.read_text())


def test_profile_step_on_the_twin(mlp_build: Path, tmp_path: Path):
    a = _profile(mlp_build, tmp_path / "a.json")
    step = a["step_instructions"]
    funcs = {f["function"]: f for f in a["functions"]}
    own = sum(f["instructions"] for f in a["functions"]
              if f["source"].startswith("runtime/") or f["source"] == "model.c")
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
    b = _profile(mlp_build, tmp_path / "b.json")
    mine = {f["function"]: f["instructions"] for f in b["functions"]
            if f["source"].startswith("runtime/") or f["source"] == "model.c"}
    assert mine == {f["function"]: f["instructions"] for f in a["functions"]
                    if f["source"].startswith("runtime/") or f["source"] == "model.c"}
