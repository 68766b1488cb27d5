"""Optimised int8 pointwise / regular conv and fully connected kernels
(runtime_c/optimized/tt_q8_conv_opt.c) against the reference kernels (tt_q8_core.c), bit for bit, on
the host and on the Cortex-M7 / M4 twins (where the DSP-extension code paths run): every geometry of
the benchmark networks plus random geometries and requantisation parameters
(tests/ckernel/test_conv_opt.c)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_conv_opt.c"
# tt_q8_master.c: the reference the file's --rounding master kernels fall back to; the
# Helium kernels (tt_q8_mve.c, tt_q8_stem_mve.c) compile to nothing elsewhere
SOURCES = [ckernel.RUNTIME[f] for f in ("tt_q8_core.c", "tt_q8_master.c", "tt_q8_conv_opt.c",
                                         "tt_q8_mve.c", "tt_q8_stem_mve.c")]
# the M55's 3x3x3 stem (tt_q8_stem_mve.c): 47 instructions per 216 MACs + per-row setup, 0.28
STEM_M55_MAX = 0.32
TWIN = pytest.mark.skipif(not ckernel.available("m7"), reason="needs arm-none-eabi-gcc and QEMU")


@pytest.mark.parametrize("target", ["host", *ckernel.twins()])
def test_conv_opt_matches_reference(target, tmp_path):
    r = ckernel.run(PROGRAM, target, tmp_path, sources=SOURCES)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "conv_opt: 0 failures" in r.stdout


@pytest.mark.skipif(not ckernel.available("m55"), reason="needs arm-none-eabi-gcc and QEMU")
@pytest.mark.parametrize("opt", ["-Os", "-O0"])
def test_conv_opt_helium_c_paths_m55(opt, tmp_path):
    """At -Os and -O0 GCC cannot allocate the Helium kernels' assembly blocks (pointwise and
    stem), which give way to their C forms: the reference's bytes on the M55 twin too."""
    r = ckernel.run(PROGRAM, "m55", tmp_path, sources=SOURCES, opt=opt)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "conv_opt: 0 failures" in r.stdout


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_conv_opt_in_bounds_host_sanitizers(tmp_path):
    """Every tensor in its own exact-size heap block under AddressSanitizer (and UBSan): the
    kernels read and write nothing outside their arguments."""
    exe = tmp_path / "conv_opt_asan"
    flags = ["-std=c99", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
             "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
             "-DEXACT_BUFFERS"]
    try:
        subprocess.run(["gcc", *flags, f"-I{ckernel.HERE}", *ckernel.RUNTIME_INC, "-o",
                        str(exe), str(PROGRAM), *map(str, SOURCES),
                        str(ckernel.HERE / "host.c"), "-lm"],
                       check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        if "sanitize" in e.stderr or "asan" in e.stderr:
            pytest.skip("gcc without sanitizer runtimes")
        raise
    p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "conv_opt: 0 failures" in p.stdout


def _bench(target: str, tmp_path) -> tuple[float, float, float, str]:
    """The microbenchmark on a twin: (ref, opt, opt_row) instructions per MAC over every
    benchmark conv geometry, and its output."""
    r = ckernel.run(PROGRAM, target, tmp_path, sources=SOURCES, defines=["BENCH"])
    assert r.returncode == 0, r.stdout[-3000:]
    m = re.search(r"all conv geometries: \d+ MACs\s+ref\s+([\d.]+)\s+opt\s+([\d.]+)\s+"
                  r"opt_row\s+([\d.]+)", r.stdout)
    assert m, r.stdout[-3000:]
    ref, opt, opt_row = map(float, m.groups())
    return ref, opt, opt_row, r.stdout


@TWIN
def test_conv_opt_instructions_per_mac_m7(tmp_path):
    """The microbenchmark (instructions per MAC, reference vs optimised, every benchmark conv
    geometry) runs, agrees with the reference, and keeps the optimised kernels well ahead."""
    ref, opt, opt_row, out = _bench("m7", tmp_path)
    assert opt < 2.2 and opt_row < 2.3 and ref > 4 * opt, out
    # real-data weights (bench/real_weights.py): one dead channel (mult 0, shift -1, its bias
    # saturated) keeps the fast path, so every geometry costs what it does without one
    dead = re.search(r"one dead channel: opt\s+([\d.]+)\s+opt_row\s+([\d.]+)", out)
    assert dead, out
    assert float(dead.group(1)) <= 1.02 * opt and float(dead.group(2)) <= 1.02 * opt_row, out
    # and one near-dead channel (right shift 27) sends only its channel pair to the general
    # path, not the layer (2.89 / 2.97 per MAC before; 1.33 / 1.48 measured)
    near = re.search(r"one near-dead channel: opt\s+([\d.]+)\s+opt_row\s+([\d.]+)", out)
    assert near, out
    assert float(near.group(1)) <= 1.15 * opt and float(near.group(2)) <= 1.15 * opt_row, out


@TWIN
def test_conv_opt_helium_pointwise_m55(tmp_path):
    """On the Cortex-M55 the pointwise convs take the Helium kernel (tt_q8_mve.c: sixteen MACs
    a VMLADAV): bit for bit the reference's, and far below the DSP kernels' 1.25 instructions
    per MAC over the benchmark geometries (M7 twin; 0.54 measured on the M55 twin)."""
    ref, opt, opt_row, out = _bench("m55", tmp_path)
    assert opt < 0.8 and opt_row < 1.0 and ref > 10 * opt, out
    big = re.search(r"pw\s+4x4\s+384->64.*opt\s+([\d.]+)\s+opt_row", out)
    assert big and float(big.group(1)) < 0.4, out  # cin 384: 24 VMLADAVs an output


@TWIN
def test_conv_opt_helium_stem_m55(tmp_path):
    """On the Cortex-M55 the 3x3x3 stem (the first conv of MobileNetV2, ProxylessNAS and MCUNet)
    takes the Helium kernel, whole tensor and row by row (as the firmware streams it): bit for
    bit the reference's (the microbenchmark compares them) at STEM_M55_MAX instructions per
    MAC or less, a fifth of the DSP kernels' 1.39."""
    _, _, _, out = _bench("m55", tmp_path)
    stem = re.search(r"reg\s+128x128\s+3->16\s+k3 s2 .* opt\s+([\d.]+)\s+opt_row\s+([\d.]+)",
                     out)
    assert stem, out
    assert float(stem.group(1)) <= STEM_M55_MAX and float(stem.group(2)) <= STEM_M55_MAX, out
