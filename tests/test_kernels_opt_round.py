"""The optimised kernels' inline stochastic rounding (runtime_c/reference/tt_q8_round.h) against the
reference int8 / int32 updates, bit for bit, on the host and on the Cortex-M7 / M4 twins,
where it runs the VCVT-saturation path (tests/ckernel/test_round.c)."""

from __future__ import annotations

import re

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_round.c"
SOURCES = [ckernel.RUNTIME["tt_q8_core.c"]]
TWIN = "needs arm-none-eabi-gcc and QEMU"


@pytest.mark.parametrize("target", [
    "host",
    pytest.param("m7", marks=pytest.mark.skipif(not ckernel.available("m7"), reason=TWIN)),
    pytest.param("m4", marks=pytest.mark.skipif(not ckernel.available("m4"), reason=TWIN)),
    pytest.param("m55", marks=pytest.mark.skipif(not ckernel.available("m55"), reason=TWIN)),
])
def test_inline_rounding_matches_reference(target, tmp_path):
    r = ckernel.run(PROGRAM, target, tmp_path, sources=SOURCES)
    assert r.returncode == 0, r.stdout[-3000:]
    m = re.search(r"round: (\d+) cases, 0 failures", r.stdout)
    assert m and int(m.group(1)) > 80_000, r.stdout[-3000:]
