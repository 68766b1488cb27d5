"""Optimised 1-bit masks (runtime_c/optimized/tt_q8_mask_opt.c) against the reference, bit
for bit, on the host and on the Cortex-M7 / M4 twins, where the assembly paths run
(tests/ckernel/test_mask_opt.c): building one of int8 outputs (tt_q8_clamp_mask) and applying
one to fp32 gradients (tt_mask_backward_f32)."""

from __future__ import annotations

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_mask_opt.c"
SOURCES = [ckernel.RUNTIME[f] for f in ("tt_q8_core.c", "tt_sparse_f32.c", "tt_q8_mask_opt.c")]
TWIN = "needs arm-none-eabi-gcc and QEMU"


@pytest.mark.parametrize("target", [
    "host",
    pytest.param("m7", marks=pytest.mark.skipif(not ckernel.available("m7"), reason=TWIN)),
    pytest.param("m4", marks=pytest.mark.skipif(not ckernel.available("m4"), reason=TWIN)),
    pytest.param("m55", marks=pytest.mark.skipif(not ckernel.available("m55"), reason=TWIN)),
])
def test_mask_opt_matches_reference(target, tmp_path):
    r = ckernel.run(PROGRAM, target, tmp_path, sources=SOURCES)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "mask_opt: 0 failures" in r.stdout
