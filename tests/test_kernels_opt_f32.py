"""The optimised fp32 kernels (runtime_c/optimized/tt_f32_opt.c) against the reference kernels,
on the host and on the Cortex-M7 / M4F twins (tests/ckernel/test_f32_opt.c): every layer geometry of
the fp32 models (MLP, AifesCNN, DigitsCNN, TinyMobileNet) and random ones, several seeds.

The optimised kernels keep the reference's operations and order for every output element, so
the C program requires bit-identical results (its TOL_ULPS is 0) and exits nonzero otherwise;
the one exception, the plain dense update p - (lr*dy)*x (no momentum, no weight decay), is held
within a few roundings of its step and one ulp of its result (STEP_REL, RESULT_REL).
Here the hashes it prints of the optimised outputs must also agree between the host (portable
C path) and the twins (assembly path): the same bits everywhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_f32_opt.c"
SOURCES = [ckernel.RUNTIME[f] for f in ("tt_f32_opt.c", "tt_conv2d_f32.c", "tt_dense_f32.c",
                                         "tt_sparse_f32.c", "tt_pool_f32.c",
                                         "tt_q8_core.c")]  # the int8 bias update's rounding
ARM = ("m7", "m4", "m55")
needs_arm = pytest.mark.skipif(not ckernel.available("m7"),
                               reason="needs arm-none-eabi-gcc and qemu-system-arm")


def _checksums(target: str, work: Path) -> dict[str, str]:
    sums = ckernel.checksums(PROGRAM, target, work, SOURCES)
    assert len(sums) > 1000  # every case ran
    return sums


@pytest.fixture(scope="module")
def host_sums(tmp_path_factory) -> dict[str, str]:
    return _checksums("host", tmp_path_factory.mktemp("host"))


def test_host_matches_reference(host_sums):
    assert any(k.startswith("aifes_conv2.") for k in host_sums)


@needs_arm
@pytest.mark.parametrize("target", ARM)
def test_twin_matches_reference_and_host(target, host_sums, tmp_path):
    sums = _checksums(target, tmp_path)
    assert sums.keys() == host_sums.keys()
    diff = [k for k in sums if sums[k] != host_sums[k]]
    assert not diff, f"{target} differs from the host in {diff[:10]}"


@needs_arm
def test_bench_m7(tmp_path):
    """The microbenchmark runs, and the optimised kernels beat the reference on each layer."""
    res = ckernel.run(PROGRAM, "m7", tmp_path, sources=SOURCES, defines=["TT_BENCH"])
    assert res.returncode == 0, res.stdout[-4000:]
    print(res.stdout)
    rows = re.findall(r"^bench +(\S+) +(.+?) +(\d+) (MAC |elem) +(\d+) +(\d+) ", res.stdout,
                      re.M)
    assert len(rows) == 22  # the AIfES CNN's and MLP's training step, kernel by kernel
    layers = re.findall(r"^layer +(\S+) +(\S+) +(\S+) +\d+ MAC +(\d+) +(\d+) ", res.stdout,
                        re.M)
    assert len(layers) == 57  # DigitsCNN's and TinyMobileNet's conv layers
    for name, ref, opt in [(r[1], r[4], r[5]) for r in rows] + \
            [(" ".join(r[:3]), r[3], r[4]) for r in layers]:
        assert int(opt) < int(ref), name
    totals = re.findall(r"^total +(\S+) +step: .*\(([\d.]+)/MAC\), x", res.stdout, re.M)
    assert [m for m, _ in totals] == ["mlp", "cnn"]
    for _model, per_mac in totals:
        assert float(per_mac) < 5.0
