"""The execution-trace parser of bench/profile_step.py (tinytrain/device/trace_profile.py);
the profile of a real step on the twin is in tests/test_bench_qemu.py."""

from __future__ import annotations

from tinytrain.device.trace_profile import UNKNOWN, by_function, parse_trace

# A trace in QEMU's format: block 0x100 (3 instructions, `f`) runs twice, block 0x200 (2,
# `g`) once and is listed again when retranslated, block 0x300 runs without a listing (the
# log began after its translation) and is left out.
TRACE = """\
----------------
IN: f
0x00000100:  4684       mov ip, r0
0x00000102:  4684       mov ip, r0
0x00000104:  d1fa       bne.n 0x100

Trace 0: 0x7f00 [00000000/00000100/00000000/ff020000] f
Trace 0: 0x7f00 [00000000/00000100/00000000/ff020000] f
----------------
IN: g
0x00000200:  4684       mov ip, r0
0x00000202:  4770       bx lr

Trace 0: 0x7f40 [00000000/00000200/00000000/ff020000] g
Trace 0: 0x7f80 [00000000/00000300/00000000/ff020000] h
----------------
IN: g
0x00000200:  4684       mov ip, r0
0x00000202:  4770       bx lr
"""


def test_parse_trace_counts_blocks_and_functions():
    blocks = {b.pc: b for b in parse_trace(TRACE.splitlines())}
    assert set(blocks) == {0x100, 0x200}
    assert (blocks[0x100].size, blocks[0x100].runs, blocks[0x100].function) == (3, 2, "f")
    assert (blocks[0x200].size, blocks[0x200].runs) == (2, 1)
    funcs = by_function(blocks.values(), {"f": "runtime/a.c"})
    assert funcs == [{"function": "f", "source": "runtime/a.c", "instructions": 6},
                     {"function": "g", "source": UNKNOWN, "instructions": 2}]
