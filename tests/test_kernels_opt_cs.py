"""Optimised channel-streamed backward kernels (runtime_c/optimized/tt_f32_bwd_opt.c) against
the reference ones (runtime_c/reference/tt_channel_stream.c), on the host and on the
Cortex-M7 / M4 twins.

tests/ckernel/test_cs_opt.c runs both over the inverted-residual blocks of the three benchmark
networks and random geometries and fails on any difference (bit for bit, except
tt_cs_pw_input_s8_opt: within its rounding bound PW_SRC_TOL). It prints a hash of every
optimised kernel's outputs: the twins must produce the host's bits. With CS_BENCH it prints
instructions per MAC on the M7 twin instead (and per element of the M55's channel mask).
"""

from __future__ import annotations

import re

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_cs_opt.c"
SOURCES = [ckernel.RUNTIME[f]
           for f in ("tt_channel_stream.c", "tt_q8_core.c", "tt_q8_master.c", "tt_f32_bwd_opt.c",
                     "tt_f32_mve.c", "tt_f32_mask_mve.c", "tt_f32_fma.c")]
KERNELS = 20
needs_host = pytest.mark.skipif(not ckernel.available("host"), reason="no host gcc")
needs_twins = pytest.mark.skipif(not ckernel.available("m7"),
                                 reason="arm-none-eabi-gcc / qemu-system-arm missing")


def _hashes(target: str, work, opt: str = "-O2", defines: list[str] = ()) -> dict[str, str]:
    r = ckernel.run(PROGRAM, target, work, sources=SOURCES, opt=opt, defines=defines)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("OK"), r.stdout
    hashes = dict(re.findall(r"^hash (\S+) ([0-9a-f]{8})", r.stdout, re.M))
    assert len(hashes) == KERNELS, r.stdout
    return hashes


@pytest.fixture(scope="module")
def host_hashes(tmp_path_factory) -> dict[str, str]:
    if not ckernel.available("host"):
        pytest.skip("no host gcc")
    return _hashes("host", tmp_path_factory.mktemp("cs_opt_host"))


@needs_host
def test_host_matches_reference(host_hashes):
    assert len(host_hashes) == KERNELS


@needs_host
@needs_twins
@pytest.mark.parametrize("target", ckernel.TWINS)
def test_twin_matches_reference_and_host_bits(target, host_hashes, tmp_path):
    assert _hashes(target, tmp_path) == host_hashes


@needs_host
@needs_twins
@pytest.mark.parametrize("opt", ["-Os", "-O0"])
def test_m55_helium_c_forms_match_host_bits(opt, host_hashes, tmp_path):
    """At -Os and -O0 the Helium kernels' assembly blocks give way to their C forms (the
    mask's intrinsics loop among them): the reference's bytes and the host's on the M55 too."""
    assert _hashes("m55", tmp_path, opt) == host_hashes


# `build --fp32-mac fused` (the M55 boards' default): the 1x1 sums' multiply-adds fused, in
# the reference kernels too, so the program still demands every optimised kernel's bits
FUSED = ["TT_F32_FMA=1"]
FUSED_KERNELS = {"pw_input_s8", "pw_input_s8_g", "pw_input_add_s8", "pw_input_add_s8_g",
                 "pw_weight_sgd_s8", "pw_weight_sgd_s8_g", "pw_weight_sgd_s8f",
                 "pw_weight_sgd_f32"}


@pytest.fixture(scope="module")
def fused_host_hashes(tmp_path_factory) -> dict[str, str]:
    if not ckernel.available("host"):
        pytest.skip("no host gcc")
    return _hashes("host", tmp_path_factory.mktemp("cs_opt_fused"), defines=FUSED)


@needs_host
def test_fused_build_changes_the_fused_kernels_only(host_hashes, fused_host_hashes):
    """The int8 updates' stochastic rounding and the int8 source's PW_SRC_TOL aside, a fused
    sum is another float: the fused kernels' outputs change, nothing else's does."""
    changed = {k for k in host_hashes if host_hashes[k] != fused_host_hashes[k]}
    assert changed <= FUSED_KERNELS, changed
    assert {"pw_input_add_s8", "pw_input_add_s8_g", "pw_input_s8_g",
            "pw_weight_sgd_f32"} <= changed


@needs_host
@needs_twins
@pytest.mark.parametrize("target", ["m55", "m7"])  # Helium's VFMA lanes; the FPU's scalar VFMA
def test_fused_twin_matches_fused_host_bits(target, fused_host_hashes, tmp_path):
    assert _hashes(target, tmp_path, defines=FUSED) == fused_host_hashes


@needs_host
@needs_twins
@pytest.mark.parametrize("target", ["m55", "m7"])
@pytest.mark.parametrize("opt", ["-Os", "-O0"])
def test_fused_c_forms_match_fused_host_bits(target, opt, fused_host_hashes, tmp_path):
    """At -Os and -O0: the fused Helium kernels' C forms (vfmaq_n_f32), and tt_cs_fmac's VFMA
    where GCC would call newlib's fmaf (which rounds twice, through double)."""
    assert _hashes(target, tmp_path, opt, FUSED) == fused_host_hashes


POINTWISE = ("pw_input_s8", "pw_input_f32", "pw_input_add_s8", "pw_input_add_f32",
             "pw_weight_sgd_f32")


@needs_twins
def test_m7_instructions_per_mac(tmp_path):
    r = ckernel.run(PROGRAM, "m7", tmp_path, sources=SOURCES, defines=["CS_BENCH"])
    assert r.returncode == 0, r.stdout
    rows = re.findall(r"^bench (\S+)(?: \(/elem\))?\s+h(\d+) .* ref\s+([\d.]+)\s+opt\s+([\d.]+)",
                      r.stdout, re.M)
    assert len(rows) > 100, r.stdout
    for name, h, ref, opt in rows:
        ref, opt = float(ref), float(opt)
        if name != "clip_f32":  # float compares: about the reference's cost
            assert opt < ref, (name, h, ref, opt)
        if name in POINTWISE and int(h) >= 8:  # 8x8 planes and up; 4x4 pay per-call setup
            assert opt <= 3.0, (name, h, opt)


MASK_M55_MAX = 2.2  # tt_cs_mask_mve: 12 instructions per 8 pixels + ~37 a call; 2.07 at 8x8


@needs_twins
def test_m55_mask_instructions_per_element(tmp_path):
    r = ckernel.run(PROGRAM, "m55", tmp_path, sources=SOURCES, defines=["CS_BENCH"])
    assert r.returncode == 0, r.stdout
    rows = re.findall(r"^bench mask \(/elem\)\s+h(\d+) .* ref\s+([\d.]+)\s+opt\s+([\d.]+)",
                      r.stdout, re.M)
    assert len(rows) >= 10, r.stdout
    for h, ref, opt in rows:
        assert float(opt) < float(ref) / 3, (h, ref, opt)
        if int(h) >= 8:  # a 4x4 map's 16 pixels share the call's ~37 instructions: 3.75
            assert float(opt) <= MASK_M55_MAX, (h, opt)


# Fused, the Helium 1x1 kernels' instructions per MAC on 8x8 maps and up, measured 0.69 / 0.75
# / 0.77 / 0.84 on average (their floor 1/4 per MAC, VFMA): each bound a little above the worst
# geometry's measured figure; separate multiply-adds (VMUL, VADD) take about 0.25 more
FUSED_M55_MAX = {"pw_input_s8_g": 0.9, "pw_input_add_s8_g": 0.9, "pw_weight_sgd_s8_g": 0.95,
                 "pw_weight_sgd_f32": 1.15}


@needs_twins
def test_m55_fused_instructions_per_mac(tmp_path):
    r = ckernel.run(PROGRAM, "m55", tmp_path, sources=SOURCES, defines=["CS_BENCH", *FUSED])
    assert r.returncode == 0, r.stdout
    rows = re.findall(r"^bench (\S+)\s+h(\d+) .* ref\s+([\d.]+)\s+opt\s+([\d.]+)", r.stdout, re.M)
    seen = set()
    for name, h, _, opt in rows:
        if name in FUSED_M55_MAX and int(h) >= 8:
            seen.add(name)
            assert float(opt) <= FUSED_M55_MAX[name], (name, h, opt)
    assert seen == set(FUSED_M55_MAX), r.stdout
