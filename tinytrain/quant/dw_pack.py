"""The constants pack of an int8 depthwise conv whose weights and bias are frozen.

The optimised depthwise kernels (runtime_c/optimized/tt_q8_dw_opt.c) derive, per 4-channel
group and call, repacked weights and requantisation constants (its `dw_setup`). A row-streamed
layer is called once per output row, so it derives them again for every row: ~400 instructions
per group and row. For frozen parameters the code generator writes them into flash once, in
the format tt_q8_dw_opt.h documents (`tt_conv2d_s8_dw_pack`), and calls the `_pk` kernels.
This module computes the same words as the C function; tests/test_dw_pack.py holds the two
against each other.
"""

from __future__ import annotations

import numpy as np

CONSTS_WORDS = 23  # sizeof(dw_consts) / 4 in tt_q8_dw_opt.c
ACC_LIMIT = 1 << 30  # |accumulator| bound of the fast requantisation (twice it must fit int32)


def _i32(v: int) -> int:
    """v wrapped to int32, as C's conversion of a uint32/int64 value on our targets."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _lanes(lo: int, hi: int) -> int:
    """Two 16-bit lanes (lo, hi) of one word, each value wrapped to 16 bits."""
    return _i32((lo & 0xFFFF) | ((hi & 0xFFFF) << 16))


def _bcast8(v: int) -> int:
    return _i32((v & 0xFF) * 0x01010101)


def dw_pack(w: np.ndarray, b: np.ndarray | None, q: dict) -> list[int]:
    """The pack of weights w (C, kh, kw, 1) int8, bias b (C,) int32 or None and requantisation q
    (in_offset, out_offset, act_min, act_max, mult, shift): C // 4 groups of CONSTS_WORDS + 2
    kh kw int32 words (channels past a multiple of 4 use the reference arithmetic)."""
    c = w.shape[0]
    taps = int(np.prod(w.shape[1:]))
    wt = w.reshape(c, taps).astype(np.int64)
    mult = [int(v) for v in q["mult"]]
    shift = [int(v) for v in q["shift"]]
    bias = [0] * c if b is None else [int(v) for v in np.asarray(b).reshape(-1)]
    in_off, out_off = int(q["in_offset"]), int(q["out_offset"])
    # |acc| <= |bias| + taps * |x + in_offset| * 128, |x + in_offset| <= 128 + |in_offset|
    sum_bound = taps * (128 + abs(in_off)) * 128
    words: list[int] = []
    for c0 in range(0, c - c % 4, 4):
        g = wt[c0:c0 + 4]
        fast = (q["act_min"] >= -128 and q["act_max"] <= 127 and q["act_min"] <= q["act_max"]
                and -128 <= out_off <= 127)
        mc, es = [], []
        for j in range(4):
            m, e = mult[c0 + j], -shift[c0 + j]
            acc_bound = (abs(bias[c0 + j]) if m != 0 else 0) + sum_bound  # dead: no bias
            cst = 0
            if m < 0 or e < 1 or e > 31 or acc_bound >= ACC_LIMIT:
                fast = False
            else:
                cst = (1 << (e - 1)) + out_off * (1 << e)
                if e > 22 and acc_bound + 2 + abs(cst) >= 1 << 31:
                    fast = False
            mc += [_i32(m), _i32(cst)]
            es.append(e)
        ini_b = [2 * bias[c0 + j] if fast and b is not None and mult[c0 + j] != 0 else 0
                 for j in range(4)]
        ini_i = [ini_b[j] + 2 * in_off * int(g[j].sum()) for j in range(4)]
        words += mc + es + [_i32(v) for v in ini_b] + [_i32(v) for v in ini_i]
        words += [_bcast8(q["act_min"]), _bcast8(q["act_max"]), int(fast)]
        for t in range(taps):
            words += [_lanes(2 * int(g[0, t]), 2 * int(g[2, t])),
                      _lanes(2 * int(g[1, t]), 2 * int(g[3, t]))]
    return words
