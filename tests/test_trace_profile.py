"""The execution-trace parser of bench/profile_step.py (tinytrain/device/trace_profile.py);
the profile of a real step on the twin is in tests/test_bench_qemu.py."""

from __future__ import annotations

from tinytrain.device.trace_profile import UNKNOWN, by_function, count_instructions, parse_trace

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


# Two blocks of a real trace (MobileNetV2 on the corstone300 twin; objdump counts 14 and 12
# instructions). QEMU's disassembler shows the low-overhead loop's DLS / LE and Helium's
# instructions as a `.byte` line for their first halfword and a 16-bit instruction for their
# second; at 0x1e4e6 it then reads the second halfword of one and the first of the next
# (a VSTRW) as a 32-bit instruction.
HELIUM_TRACE = """\
----------------
IN: tt_crc32
0x00003b02:  b510       push     {r4, lr}
0x00003b04:  43c3       mvns     r3, r0
0x00003b06:  f042       .byte    0x42, 0xf0
0x00003b08:  e001       b        #0x3b0e
0x00003b0a:  4c0b       ldr      r4, [pc, #0x2c]
0x00003b0c:  3901       subs     r1, #1
0x00003b0e:  f811 0f01  ldrb     r0, [r1, #1]!
0x00003b12:  4058       eors     r0, r3
0x00003b14:  f000 030f  and      r3, r0, #0xf
0x00003b18:  f854 3023  ldr.w    r3, [r4, r3, lsl #2]
0x00003b1c:  ea83 1310  eor.w    r3, r3, r0, lsr #4
0x00003b20:  f003 020f  and      r2, r3, #0xf
0x00003b24:  f854 2022  ldr.w    r2, [r4, r2, lsl #2]
0x00003b28:  ea82 1313  eor.w    r3, r2, r3, lsr #4
0x00003b2c:  f00f       .byte    0x0f, 0xf0
0x00003b2e:  c811       ldm      r0, {r0, r4}

Trace 0: 0x7f278c015dc0 [00800442/00003b02/00000050/ff020200] tt_crc32
----------------
IN: tt_q8_stem_mve
0x0001e4ce:  fc94       .byte    0x94, 0xfc
0x0001e4d0:  0e06       lsrs     r6, r0, #0x18
0x0001e4d2:  462b       mov      r3, r5
0x0001e4d4:  fe71       .byte    0x71, 0xfe
0x0001e4d6:  0f4d       lsrs     r5, r1, #0x1d
0x0001e4d8:  fc94       .byte    0x94, 0xfc
0x0001e4da:  6e04       ldr      r4, [r0, #0x60]
0x0001e4dc:  eef1       .byte    0xf1, 0xee
0x0001e4de:  ef00       .byte    0x00, 0xef
0x0001e4e0:  eca3 1e10  stc      p14, c1, [r3], #0x40
0x0001e4e4:  eef1       .byte    0xf1, 0xee
0x0001e4e6:  ef26 ed83  vsub.f32 d14, d22, d3
0x0001e4ea:  7e00       ldrb     r0, [r0, #0x18]
0x0001e4ec:  341b       adds     r4, #0x1b
0x0001e4ee:  fb08 f30e  mul      r3, r8, lr
0x0001e4f2:  3520       adds     r5, #0x20
0x0001e4f4:  b112       cbz      r2, #0x1e4fc

Trace 0: 0x7f278c02a040 [00800442/0001e4ce/00000050/ff020200] tt_q8_stem_mve
Trace 0: 0x7f278c02a040 [00800442/0001e4ce/00000050/ff020200] tt_q8_stem_mve
"""


def test_parse_trace_counts_an_undecoded_instruction_once():
    blocks = {b.pc: b for b in parse_trace(HELIUM_TRACE.splitlines())}
    assert (blocks[0x3B02].size, blocks[0x3B02].runs) == (14, 1)
    assert (blocks[0x1E4CE].size, blocks[0x1E4CE].runs) == (12, 2)
    assert count_instructions([0x4684, 0xF811, 0x0F01, 0xEEF1, 0xEF26, 0x4770]) == 4
