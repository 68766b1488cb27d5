"""Prove a linked ARMv6-M firmware holds only ARMv6-M instructions.

The RP2040's Cortex-M0+ is trained on a Cortex-M3 twin (no QEMU machine has an M0+ with
enough RAM), and the M3 runs every ARMv7-M instruction. A kernel's inline assembly, a
library built for the wrong architecture or a mistaken flag would run on the twin and fault
on the board. So the build disassembles the linked ELFs and checks each instruction against
the ARMv6-M Architecture Reference Manual (DDI 0419, chapter A5 "The Thumb instruction set
encoding"): ARMv6-M's only 32-bit Thumb instructions are BL, DMB, DSB, ISB, MRS and MSR, and
of the 16-bit encodings ARMv7-M adds CBZ, CBNZ and IT. Only the bytes of FUNC symbols are
read: a section holding code and data (.data with a function that runs from RAM, .text
with the constants linked into it) is otherwise disassembled whole, data included.
"""

from __future__ import annotations

import bisect
import re
import subprocess
from pathlib import Path

ARMV6M_CPUS = ("cortex-m0", "cortex-m0plus", "cortex-m1")
WIDE_ALLOWED = frozenset({"bl", "dmb", "dsb", "isb", "mrs", "msr"})
NARROW_V7_ONLY = frozenset({"cbz", "cbnz"})  # and IT, with its then/else suffixes
# "  80f0:\tf000 f802 \tbl\t80f8 <x>": address, one or two halfwords, the mnemonic
_LINE = re.compile(r"^\s*([0-9a-f]+):\s+([0-9a-f]{4})(?: ([0-9a-f]{4}))?\s+(\S+)")
_IT = re.compile(r"^it[te]{0,3}$")


def is_armv6m(cpu: str) -> bool:
    return cpu in ARMV6M_CPUS


def functions(elf: Path, readelf: str) -> list[tuple[int, int]]:
    """(start, end) of every FUNC symbol of `elf` (the Thumb bit cleared)."""
    out = subprocess.run([readelf, "-sW", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    spans = []
    for line in out.splitlines():
        parts = line.split()  # Num: Value Size Type Bind Vis Ndx Name
        if len(parts) >= 8 and parts[3] == "FUNC" and parts[6] != "UND":
            start = int(parts[1], 16) & ~1
            spans.append((start, start + int(parts[2], 0)))
    return spans


def violations(elf: Path, objdump: str = "arm-none-eabi-objdump") -> list[str]:
    """Instructions of `elf`'s code that ARMv6-M lacks, as 'address: mnemonic (function)'."""
    dump = subprocess.run([objdump, "-d", str(elf)], capture_output=True, text=True,
                          check=True).stdout  # raw encodings show each instruction's width
    spans = sorted(functions(elf, objdump.replace("objdump", "readelf")))
    starts = [s for s, _ in spans]
    bad, func = [], "?"
    for line in dump.splitlines():
        if line.endswith(">:"):
            func = line.split("<", 1)[-1][:-2]
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        addr, _, second, op = m.groups()
        k = bisect.bisect_right(starts, int(addr, 16)) - 1
        if k < 0 or int(addr, 16) >= spans[k][1]:  # not inside a function: data
            continue
        mnemonic = op.split(".")[0].lower()
        if mnemonic.startswith("."):  # .word / .short: data in the code
            continue
        wide = second is not None
        if (wide and mnemonic not in WIDE_ALLOWED) or mnemonic in NARROW_V7_ONLY \
                or _IT.match(mnemonic):
            bad.append(f"0x{addr}: {op} ({func})")
    return bad
