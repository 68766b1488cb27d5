"""Instructions per function and per basic block of one training step on a QEMU twin.

`tinytrain bench --qemu` counts instructions per op (the firmware's SysTick counters). Below
an op, where a kernel's instructions go (its inner loop, its setup, a spilled register, a
conversion) shows only in the executed code. This QEMU build has no TCG plugins, so the twin
runs with `-d exec,nochain,in_asm`: QEMU prints each translated block's instructions once
(`IN: symbol` and one line per instruction) and a line each time a block starts (`nochain`:
every block returns to the loop that logs it). Instructions per block times executions per
block is an exact count (under `-icount`, one instruction per virtual nanosecond, the same
code runs whatever the host's load). A block's size comes from the halfwords its listing
shows, decoded again by Thumb's length rule: QEMU's disassembler does not know the Helium and
low-overhead-loop encodings, shows such a 32-bit instruction as a `.byte` line for its first
halfword and a 16-bit instruction for its second, and may then read the next instruction's
first halfword as part of a 32-bit one, so a line is not an instruction. The trace covers the
twin's whole life: boot, the hello and the sample's transfer besides the step; functions are
named with their source file (from the build's call-graph files) so the firmware's link code
reads apart from the kernels.
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinytrain.boards import load_board
from tinytrain.device.bench import _samples, twin_instructions_per_tick
from tinytrain.device.runner import load_program_info, open_program

_EXEC = re.compile(r"^Trace \d+: \S+ \[[0-9a-f]+/([0-9a-f]+)/")
_INSN = re.compile(r"^0x([0-9a-f]{8}):  ([0-9a-f]{4})(?: ([0-9a-f]{4}))?(?:\s|$)")
# a call-graph node (GCC's -fcallgraph-info): "name\nfile:line:col\n..." in its label
_CI_NODE = re.compile(r'node: \{ title: "[^"]+" label: "([^"\\]+)\\n([^"\\:]+):\d+:\d+')


# a function with no call-graph node: libc's assembly, or one of ours defined in an asm block
UNKNOWN = "? (asm or libc)"


def _is_wide(halfword: int) -> bool:
    """A Thumb instruction starting with this halfword is 32-bit (0b11101, 0b11110, 0b11111
    in its top five bits), else 16-bit."""
    return halfword >> 11 in (0x1D, 0x1E, 0x1F)


def count_instructions(halfwords: Iterable[int]) -> int:
    """Instructions in a run of Thumb code that starts on an instruction."""
    n, tail = 0, False
    for h in halfwords:
        if tail:
            tail = False
        else:
            n += 1
            tail = _is_wide(h)
    return n


@dataclass(frozen=True)
class Block:
    pc: int
    function: str  # the symbol QEMU names the block by ("" when it has none)
    size: int  # instructions
    runs: int  # times it started


def parse_trace(lines: Iterable[str]) -> list[Block]:
    """Every block the trace executed, with its size from its `IN:` listing. A block that
    starts without a listing (the log began after it was translated) is skipped."""
    sizes: dict[int, tuple[int, str]] = {}
    runs: Counter[int] = Counter()
    name, first, end = "", -1, -1
    code: list[int] = []  # the block's halfwords, in address order

    def close() -> None:
        nonlocal first, end
        n = count_instructions(code)
        if first >= 0 and n:
            sizes[first] = (n, name)
        first, end = -1, -1
        code.clear()

    for line in lines:
        if line.startswith("Trace "):
            close()
            m = _EXEC.match(line)
            if m:
                runs[int(m.group(1), 16)] += 1
        elif line.startswith("IN:"):
            close()
            name = line[3:].strip()
        else:
            m = _INSN.match(line)
            if m:
                pc = int(m.group(1), 16)
                if first < 0:
                    first = pc
                elif pc != end:  # not contiguous (never seen): count the parts apart
                    n = count_instructions(code)
                    code.clear()
                    code.extend([0] * n)  # n narrow halfwords: n instructions
                words = [int(w, 16) for w in m.group(2, 3) if w]
                code.extend(words)
                end = pc + 2 * len(words)
            else:
                close()
    close()
    return [Block(pc, sizes[pc][1], sizes[pc][0], r) for pc, r in runs.items() if pc in sizes]


def sources(build_dir: Path) -> dict[str, str]:
    """Function name -> its source file, relative to the build, from the twin's call-graph
    files (su/qemu/*.ci)."""
    out: dict[str, str] = {}
    for ci in sorted((Path(build_dir) / "su" / "qemu").glob("*.ci")):
        for name, src in _CI_NODE.findall(ci.read_text(errors="replace")):
            f, src = name.split(".")[0], src.removeprefix("../../")
            if f not in out or not out[f].endswith(".c"):  # a definition over a declaration
                out[f] = src
    return out


def by_function(blocks: Iterable[Block], where: dict[str, str]) -> list[dict[str, Any]]:
    """Instructions per function, most first (GCC's clones, f.isra.0 / f.part.0, count as
    f's own name but keep their suffix in the table)."""
    total: Counter[str] = Counter()
    for b in blocks:
        total[b.function] += b.size * b.runs
    return [{"function": f or "(no symbol)", "source": where.get(f.split(".")[0]) or UNKNOWN,
             "instructions": n} for f, n in total.most_common()]


def profile_step(build_dir: Path, data: Path | None = None, seed: int = 0,
                 trace: Path | None = None) -> dict[str, Any]:
    """Boot the twin with the trace on, train one sample (the first of `data`, an .npz, or a
    seeded random one shaped like the model's, as `tinytrain bench` takes), count the trace.
    `trace`: keep QEMU's log there."""
    build_dir = Path(build_dir)
    info = load_program_info(build_dir)
    xs, ys = _samples(info, data, 1, seed)
    with tempfile.TemporaryDirectory(prefix="tt-trace-") as tmp:
        path = Path(trace) if trace is not None else Path(tmp) / "trace.log"
        with open_program(build_dir, qemu=True, icount=True, trace=path, timeout=600) as dev:
            r = dev.train_full(xs[0], ys[0])
        with open(path, errors="replace") as f:  # QEMU has quit: the log is complete
            blocks = parse_trace(f)
    funcs = by_function(blocks, sources(build_dir))
    return {"step_instructions":
            r.ticks * twin_instructions_per_tick(load_board(info.get("board", "host"))),
            "traced_instructions": sum(b.size * b.runs for b in blocks),
            "functions": funcs,
            "blocks": [{"pc": b.pc, "function": b.function, "size": b.size, "runs": b.runs,
                        "instructions": b.size * b.runs}
                       for b in sorted(blocks, key=lambda b: -b.size * b.runs)]}
