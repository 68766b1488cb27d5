"""The optimised updates of int8 layers against the reference, bit for bit, on the host and on
the Cortex-M7 / M4F twins: the bias gradients (tt_bias_sgd_s32_opt, tt_bias_grad_row_f32_opt in
runtime_c/optimized/tt_f32_opt.c), whose column sums run in assembly, and the fully connected
weight update (tt_dense_weight_sgd_s8_opt in tt_f32_bwd_opt.c), whose stochastic rounding
does (tests/ckernel/test_bias_opt.c: every rounding mode, saturating biases and weights, odd
values, 8-, 4- and 1-wide channel chunks, odd and even rows)."""

from __future__ import annotations

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_bias_opt.c"
SOURCES = [ckernel.RUNTIME[f] for f in ("tt_q8_core.c", "tt_row_backward.c", "tt_f32_opt.c",
                                         "tt_conv2d_f32.c", "tt_dense_f32.c", "tt_sparse_f32.c",
                                         "tt_pool_f32.c", "tt_f32_bwd_opt.c",
                                         "tt_channel_stream.c", "tt_q8_master.c",
                                         "tt_f32_mve.c",  # the M55's row rounding
                                         "tt_f32_mask_mve.c")]
TWIN = "needs arm-none-eabi-gcc and QEMU"


@pytest.mark.parametrize("target", [
    "host",
    pytest.param("m7", marks=pytest.mark.skipif(not ckernel.available("m7"), reason=TWIN)),
    pytest.param("m4", marks=pytest.mark.skipif(not ckernel.available("m4"), reason=TWIN)),
    pytest.param("m55", marks=pytest.mark.skipif(not ckernel.available("m55"), reason=TWIN)),
])
def test_bias_opt_matches_reference(target, tmp_path):
    r = ckernel.run(PROGRAM, target, tmp_path, sources=SOURCES)
    assert r.returncode == 0, r.stdout[-3000:]
    assert "bias_opt: 0 failures" in r.stdout
