"""Optimised int8 depthwise convolution and residual add (runtime_c/optimized/tt_q8_dw_opt.c)
against the reference kernels (tt_conv2d_s8 / tt_conv2d_s8_row in tt_q8_core.c, tt_add_s8 /
tt_add_s8_row in tt_q8_binary.c), bit for bit, on the host and on the Cortex-M7 / M4 twins (where
the DSP code paths run) and the M55 twin (Helium: tt_q8_mve.c, tt_q8_add_mve.c): every depthwise
geometry and residual add of the benchmark networks, random geometries (any kernel size, stride,
padding; row rings), random and edge-case requantisation and add constants (a sweep over every
path of the add: offsets, rescales, shifts, clamps, lengths with tails), every byte pair of the add
(tests/ckernel/test_dw_opt.c). With -DTT_DW_BENCH the same program is a microbenchmark
(instructions per MAC or per element on the twins)."""

from __future__ import annotations

import subprocess

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_dw_opt.c"
SOURCES = [ckernel.RUNTIME["tt_q8_core.c"], ckernel.RUNTIME["tt_q8_binary.c"],
           ckernel.RUNTIME["tt_q8_dw_opt.c"], ckernel.RUNTIME["tt_q8_mve.c"],
           ckernel.RUNTIME["tt_q8_add_mve.c"]]
TWIN = "needs arm-none-eabi-gcc and QEMU"


@pytest.mark.parametrize("target", [
    "host",
    pytest.param("m7", marks=pytest.mark.skipif(not ckernel.available("m7"), reason=TWIN)),
    pytest.param("m4", marks=pytest.mark.skipif(not ckernel.available("m4"), reason=TWIN)),
    pytest.param("m55", marks=pytest.mark.skipif(not ckernel.available("m55"), reason=TWIN)),
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
    opts = {}
    for line in rows:
        ref, opt = (float(v) for v in line.split("| ref")[1].split("instr")[0].split("opt"))
        assert opt * 2 < ref, line
        opts[" ".join(line.split("|")[0].split())] = opt
    # real-data weights (bench/real_weights.py): one dead channel (multiplier 0, shift -1, its
    # bias saturated) keeps its 4-channel group on the fast path: the geometry costs the same
    dead = {k: v for k, v in opts.items() if k.endswith(" dead")}
    assert len(dead) >= 5, r.stdout
    for k, v in dead.items():
        assert v <= 1.01 * opts[k.removesuffix(" dead")], r.stdout


# Helium depthwise (tt_q8_dw_mve) on the M55 twin, whole 64x64 maps: a 3x3 window is one
# VMLADAV a pixel plus its share of the column fill and the requantisation (0.92 measured, the
# M55's DSP kernels 2.22); 7x7 stride 2 takes four VMLADAVs for 49 taps (0.61, DSP 2.31)
HELIUM_DW_3X3_MAX = 1.1
HELIUM_DW_7X7_MAX = 0.75
# Helium residual add (tt_q8_add_mve), instructions per element: with LiteRT's constants (one
# input linear, the other's right shift 1..3) a 16-element block is 51 instructions (3.21
# measured on 16x16x24, the M55's DSP loop 14.0); other shifts and clamps cost up to 61 (3.82)
HELIUM_ADD_MAX = 3.4
HELIUM_ADD_ANY_MAX = 4.0


@pytest.mark.skipif(not ckernel.available("m55"), reason=TWIN)
def test_dw_helium_m55(tmp_path):
    """On the Cortex-M55 the depthwise convs and the residual adds take the Helium kernels
    (bit-exact: the benchmark checks every output against the reference) at the instructions
    per MAC and per element above."""
    r = ckernel.run(PROGRAM, "m55", tmp_path, sources=SOURCES, defines=["TT_DW_BENCH"])
    assert r.returncode == 0, r.stdout[-3000:]
    assert "dw_opt: 0 failures" in r.stdout
    opts = {}
    for line in r.stdout.splitlines():
        if "| ref" in line:
            ref, opt = (float(v) for v in line.split("| ref")[1].split("instr")[0].split("opt"))
            opts[" ".join(line.split("|")[0].split())] = opt
    assert opts["dw 64x64 c16 k3 s1 full"] <= HELIUM_DW_3X3_MAX, r.stdout
    assert opts["dw 32x32 c48 k7 s2 full"] <= HELIUM_DW_7X7_MAX, r.stdout
    assert opts["add 16x16 c24 full b>>1"] <= HELIUM_ADD_MAX, r.stdout
    adds = [v for k, v in opts.items() if k.startswith("add ")]
    assert len(adds) >= 7 and max(adds) <= HELIUM_ADD_ANY_MAX, r.stdout


@pytest.mark.parametrize("target", [
    pytest.param("m4", marks=pytest.mark.skipif(not ckernel.available("m4"), reason=TWIN)),
    pytest.param("m55", marks=pytest.mark.skipif(not ckernel.available("m55"), reason=TWIN)),
])
@pytest.mark.parametrize("opt", ["-Os", "-O0"])
def test_dw_opt_at_size_and_debug_levels_matches_reference(opt, target, tmp_path):
    """GCC 12 cannot allocate the DSP blocks' registers at -Os or -O0 (a user's IDE default and
    a debug build), nor the Helium blocks': the kernels must still compile there, taking their
    C paths, and give the reference's bytes on the Cortex-M4F and the M55 twins."""
    r = ckernel.run(PROGRAM, target, tmp_path, sources=SOURCES, opt=opt)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "dw_opt: 0 failures" in r.stdout


@pytest.mark.skipif(not ckernel.available("m7"), reason=TWIN)
@pytest.mark.parametrize("cpu", sorted(ckernel.TARGETS))
def test_every_runtime_kernel_compiles_at_every_level(cpu, tmp_path):
    """An exported library is compiled with the project's own -O level: every runtime file,
    with the boards' flags and -Werror, at each level GCC offers."""
    flags = ckernel.TARGETS[cpu][1]
    sources = sorted(str(p) for n, p in ckernel.RUNTIME.items() if n.endswith(".c"))
    for opt in ("-O0", "-Og", "-O1", "-O2", "-O3", "-Os", "-Oz"):
        p = subprocess.run(["arm-none-eabi-gcc", *ckernel.CFLAGS, *flags, opt, "-c",
                            *ckernel.RUNTIME_INC, *sources], cwd=tmp_path,
                           capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
        assert p.returncode == 0, f"{cpu} {opt}:\n{p.stderr[-3000:]}"


COMPILE_TIMEOUT = 300  # seconds for the whole runtime at one level; GCC 12 takes ~15 s at -O2
