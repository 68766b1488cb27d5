"""Optimised int8 depthwise convolution and residual add (runtime_c/tt_q8_dw_opt.c) against the
reference kernels (tt_conv2d_s8 / tt_conv2d_s8_row in tt_q8_core.c, tt_add_s8 / tt_add_s8_row
in tt_q8_binary.c), bit for bit, on the host and on the Cortex-M7 / M4 twins (where the DSP
code paths run): every depthwise geometry and residual add of the benchmark networks, random
geometries (any kernel size, stride, padding; row rings), random and edge-case requantisation
and add constants, every byte pair of the add (tests/ckernel/test_dw_opt.c). With
-DTT_DW_BENCH the same program is a microbenchmark (instructions per MAC on the twins)."""

from __future__ import annotations

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_dw_opt.c"
SOURCES = [ckernel.RUNTIME / "tt_q8_core.c", ckernel.RUNTIME / "tt_q8_binary.c",
           ckernel.RUNTIME / "tt_q8_dw_opt.c"]
TWIN = "needs arm-none-eabi-gcc and QEMU"


@pytest.mark.parametrize("target", [
    "host",
    pytest.param("m7", marks=pytest.mark.skipif(not ckernel.available("m7"), reason=TWIN)),
    pytest.param("m4", marks=pytest.mark.skipif(not ckernel.available("m4"), reason=TWIN)),
])
def test_dw_and_add_opt_match_reference(target, tmp_path):
    r = ckernel.run(PROGRAM, target, tmp_path, sources=SOURCES)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "dw_opt: 0 failures" in r.stdout


@pytest.mark.skipif(not ckernel.available("m7"), reason=TWIN)
def test_dw_and_add_opt_are_faster_on_m7(tmp_path):
    """The microbenchmark runs (and checks its outputs); the optimised kernels take well under
    half the reference's instructions on every benchmarked geometry."""
    r = ckernel.run(PROGRAM, "m7", tmp_path, sources=SOURCES, defines=["TT_DW_BENCH"])
    assert r.returncode == 0, r.stdout[-3000:]
    rows = [line for line in r.stdout.splitlines() if "| ref" in line]
    assert len(rows) >= 10
    for line in rows:
        ref, opt = (float(v) for v in line.split("| ref")[1].split("instr")[0].split("opt"))
        assert opt * 2 < ref, line
