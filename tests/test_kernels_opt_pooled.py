"""The optimised pooled-gradient kernels (runtime_c/optimized/tt_pooled_opt.c) against the
reference kernels (tt_pooled_grad.c), on the host and on the Cortex-M7 / M4F twins
(tests/ckernel/test_pooled_opt.c): the DigitsCNN's pooled conv, every gate kind and random
geometries, including maps past a slab and rows wider than one.

Each element gets the reference's products in the reference's order, so the C program requires
bit-identical results and exits nonzero otherwise; the hashes it prints of the optimised
outputs must also agree between the host (portable C) and the twins (assembly)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_pooled_opt.c"
SOURCES = ckernel.RUNTIME_SOURCES
needs_arm = pytest.mark.skipif(not ckernel.available("m7"),
                               reason="needs arm-none-eabi-gcc and qemu-system-arm")


def _checksums(target: str, work: Path) -> dict[str, str]:
    sums = ckernel.checksums(PROGRAM, target, work, SOURCES)
    assert len(sums) == 4 * (12 + 240)  # every case ran, four outputs each
    return sums


@pytest.fixture(scope="module")
def host_sums(tmp_path_factory) -> dict[str, str]:
    return _checksums("host", tmp_path_factory.mktemp("host"))


def test_host_matches_reference(host_sums):
    assert "digits_down_g1.sgd_w" in host_sums


@needs_arm
@pytest.mark.parametrize("target", ckernel.TWINS)
def test_twin_matches_reference_and_host(target, host_sums, tmp_path):
    sums = _checksums(target, tmp_path)
    diff = [k for k in sums if sums[k] != host_sums.get(k)]
    assert not diff, f"{target} differs from the host in {diff[:10]}"


@needs_arm
def test_bench_m7(tmp_path):
    """On the DigitsCNN's pooled conv the optimised kernels take a fraction of the reference's
    instructions (the reference reads the gate inside its innermost loop)."""
    res = ckernel.run(PROGRAM, "m7", tmp_path, sources=SOURCES, defines=["TT_BENCH"])
    assert res.returncode == 0, res.stdout[-4000:]
    print(res.stdout)
    rows = re.findall(r"^bench digits_down (\S+) (\d+) MAC (\d+) (\d+)$", res.stdout, re.M)
    assert [r[0] for r in rows] == ["bwd_in", "bwd_w", "sgd_w"]
    for _name, macs, ref, opt in rows:
        assert 2 * int(opt) < int(ref)
        assert int(opt) < 4 * int(macs)  # a few instructions per MAC, not tens
