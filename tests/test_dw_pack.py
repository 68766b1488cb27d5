"""The depthwise constants pack the code generator writes into flash for frozen parameters
(tinytrain/quant/dw_pack.py) against the C function that defines the format
(tt_conv2d_s8_dw_pack in runtime_c/optimized/tt_q8_dw_opt.c): word for word, over random
weights, biases and requantisation constants, including every constant the fast path refuses.
The packed kernels themselves are held bit for bit to the reference in tests/ckernel/
test_dw_opt.c, and whole networks built with packs in tests/test_kernels_opt_models.py."""

from __future__ import annotations

import numpy as np
import pytest

from tests import ckernel
from tinytrain.quant.dw_pack import CONSTS_WORDS, dw_pack

CASES = 120


def _case(rng: np.random.Generator, i: int) -> dict:
    k = int(rng.choice([1, 3, 5, 7]))
    kh, kw = (k, k) if i % 4 else (int(rng.integers(1, 8)), int(rng.integers(1, 8)))
    c = int(rng.integers(1, 25))
    q = {"in_offset": int(rng.choice([rng.integers(-127, 129), -255, 255, -127, 128])),
         "out_offset": int(rng.integers(-128, 128))}
    lo = int(rng.choice([-128, q["out_offset"], rng.integers(-128, 128)]))
    q["act_min"], q["act_max"] = lo, int(rng.integers(lo, 128))
    if i % 10 == 0:  # an activation range the fast path refuses
        q["act_min"], q["act_max"] = 5, 3
    mult = rng.integers(1 << 30, 1 << 31, c)
    shift = rng.integers(-12, 0, c)
    bias = rng.integers(-40000, 40001, c)
    for j in range(c):  # the fast path's limits, one channel in three
        pick = int(rng.integers(0, 12))
        if pick == 0:
            shift[j] = int(rng.integers(0, 4))
        elif pick == 1:
            shift[j] = int(rng.integers(-31, -17))
        elif pick == 2:
            bias[j] = int(rng.integers(-(1 << 30), (1 << 30) + 1))
        elif pick == 3:
            bias[j] = int(rng.integers(-(1 << 31), 1 << 31))
        elif pick == 4:
            mult[j] = 0
        elif pick == 5:
            bias[j] = (1 << 30) - kh * kw * 383 * 128 - int(rng.integers(-4, 5))
        elif pick == 6:  # dead (real-data weights): the compiler's shift -1, bias saturated
            mult[j], shift[j] = 0, -1
            bias[j] = int(rng.choice([(1 << 31) - 1, 1 - (1 << 31), rng.integers(-40000, 40001)]))
    q["mult"], q["shift"] = [int(v) for v in mult], [int(v) for v in shift]
    w = rng.integers(-128, 128, (c, kh, kw, 1)).astype(np.int8)
    b = None if i % 7 == 3 else bias.astype(np.int32)
    return {"w": w, "b": b, "q": q, "pack": dw_pack(w, b, q)}


def _ints(name: str, ctype: str, values) -> str:
    vals = ", ".join(str(int(v)) for v in values) or "0"
    return f"static const {ctype} {name}[] = {{{vals}}};\n"


def _program(cases: list[dict]) -> str:
    out = ['#include <stdio.h>\n#include "harness.h"\n#include "tt_kernels.h"\n',
           "static int32_t got[8192];\n"]
    body = []
    for i, cs in enumerate(cases):
        w, q = cs["w"], cs["q"]
        c, kh, kw = w.shape[0], w.shape[1], w.shape[2]
        out.append(_ints(f"w{i}", "int8_t", w.reshape(-1)))
        if cs["b"] is not None:
            out.append(_ints(f"b{i}", "int32_t", cs["b"]))
        out.append(_ints(f"m{i}", "int32_t", q["mult"]))
        out.append(_ints(f"s{i}", "int32_t", q["shift"]))
        out.append(_ints(f"e{i}", "int32_t", cs["pack"]))
        body.append(f"""    {{
        tt_conv_geom g = {{0}};
        const tt_q8_requant q = {{{q['in_offset']}, {q['out_offset']}, {q['act_min']},
                                  {q['act_max']}, m{i}, s{i}}};
        g.h = g.w = g.oh = g.ow = 4;
        g.cin = g.cout = g.groups = {c};
        g.kh = {kh};
        g.kw = {kw};
        n = tt_conv2d_s8_dw_pack_words(&g);
        if (n != {len(cs['pack'])}) {{
            snprintf(s, sizeof s, "case {i}: %ld words, python {len(cs['pack'])}\\n", (long)n);
            th_puts(s);
            ++failures;
        }} else {{
            tt_conv2d_s8_dw_pack(got, w{i}, {'NULL' if cs['b'] is None else f'b{i}'}, &g, &q);
            for (j = 0; j < n; ++j) {{
                if (got[j] != e{i}[j]) {{
                    snprintf(s, sizeof s, "case {i} word %ld: C %ld python %ld\\n", (long)j,
                             (long)got[j], (long)e{i}[j]);
                    th_puts(s);
                    ++failures;
                    break;
                }}
            }}
        }}
    }}
""")
    out.append("int main(void)\n{\n    char s[128];\n    int32_t n, j;\n    int failures = 0;\n")
    out += body
    out.append('    snprintf(s, sizeof s, "dw_pack: %d failures\\n", failures);\n'
               "    th_puts(s);\n    th_exit(failures != 0);\n    return 0;\n}\n")
    return "".join(out)


@pytest.mark.skipif(not ckernel.available("host"), reason="needs gcc")
def test_python_pack_equals_the_c_pack(tmp_path):
    rng = np.random.default_rng(7)
    cases = [_case(rng, i) for i in range(CASES)]
    assert max(len(cs["pack"]) for cs in cases) <= 8192  # each case fits `got`
    assert any(cs["pack"] and cs["pack"][CONSTS_WORDS - 1] == 0 for cs in cases)  # refused
    assert any(cs["pack"] and cs["pack"][CONSTS_WORDS - 1] == 1 for cs in cases)  # and fast
    program = tmp_path / "test_dw_pack.c"
    program.write_text(_program(cases))
    r = ckernel.run(program, "host", tmp_path, sources=[ckernel.RUNTIME["tt_q8_dw_opt.c"],
                                                        ckernel.RUNTIME["tt_q8_core.c"]])
    assert "dw_pack: 0 failures" in r.stdout, r.stdout[-3000:]
    assert r.returncode == 0


def test_no_pack_below_four_channels():
    w = np.ones((3, 3, 3, 1), np.int8)
    q = {"in_offset": 0, "out_offset": 0, "act_min": -128, "act_max": 127,
         "mult": [1 << 30] * 3, "shift": [-1] * 3}
    assert dw_pack(w, None, q) == []
