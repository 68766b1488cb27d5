"""What the linked firmware really occupies: arm-none-eabi-size sections and a worst-case stack
depth from GCC's call graph (-fcallgraph-info=su), for report.json and the budget check."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tinytrain.boards import Board
from tinytrain.errors import BuildError, FlashOverflow

# newlib's memcpy/memset/expf/logf/tanhf are not compiled with our flags, so the call graph
# has no frame size for them; each is a leaf with a small frame (measured <= 40 bytes in
# newlib 3.3's Thumb-2 build), so one allowance covers the deepest such call.
LIBC_FRAME_ALLOWANCE = 64
# Exception entry stacks 26 words (FPU context, lazy stacking) on top of whatever runs.
EXCEPTION_FRAME = 104

_NODE = re.compile(r'node: \{ title: "([^"]+)" label: "[^"]*?\\n[^"]*?\\n(\d+) bytes \((\w+)')
_EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


def section_sizes(elf: Path, size_tool: str) -> dict[str, int]:
    """Bytes of flash (text: code, constants and .data's initial image) and static SRAM."""
    if shutil.which(size_tool) is None:
        raise BuildError(f"{size_tool} is not installed")
    out = subprocess.run([size_tool, "-A", str(elf)], capture_output=True, text=True,
                         check=True).stdout
    sec = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            sec[parts[0]] = int(parts[1])
    text = sum(v for k, v in sec.items() if k == ".isr_vector" or  # .text, .text1, ...
               k.startswith((".text", ".ARM")))
    data, bss, stack = sec.get(".data", 0), sec.get(".bss", 0), sec.get(".stack", 0)
    return {"text": text, "data": data, "bss": bss, "stack_reserved": stack,
            "flash_used": text + data, "sram_used": data + bss + stack}


# Relocations of a call or a branch to a function: its address is not taken there.
_CALL_RELOCS = frozenset({"R_ARM_THM_CALL", "R_ARM_THM_JUMP24", "R_ARM_THM_JUMP19",
                          "R_ARM_THM_JUMP11", "R_ARM_THM_JUMP8", "R_ARM_CALL", "R_ARM_JUMP24",
                          "R_ARM_PC24", "R_ARM_PLT32"})
# Sections that name functions without running them: debug information (-g), unwind tables
# (-funwind-tables), notes
_NOT_RUN = (".debug", ".ARM.exidx", ".ARM.extab", ".note", ".comment")
_RELOC_SECTION = re.compile(r"Relocation section '([^']+)'")
# GCC's node for every call through a pointer (-fcallgraph-info)
INDIRECT_CALL = "__indirect_call"


def address_taken(obj_dir: Path, readelf: str) -> set[str]:
    """Functions whose address the objects in obj_dir use other than by calling them: the
    targets an indirect call can reach. A reference from the vector table is an entry
    (interrupts are EXCEPTION_FRAME's), one from a function's own section (its switch table)
    is not its address, nor are debug information's and unwind tables' (_NOT_RUN). With
    -ffunction-sections a static function is referenced through its section symbol
    .text.NAME."""
    if shutil.which(readelf) is None:
        raise BuildError(f"{readelf} is not installed")
    functions: set[str] = set()
    refs: set[str] = set()
    for obj in sorted(obj_dir.glob("*.o")):
        out = subprocess.run([readelf, "-srW", str(obj)], capture_output=True, text=True,
                             check=True).stdout
        section = ""
        for line in out.splitlines():
            m = _RELOC_SECTION.match(line)
            if m:
                section = m.group(1)
                continue
            parts = line.split()
            if len(parts) >= 8 and parts[3] == "FUNC":  # symbol table: Num Value Size Type ..
                functions.add(parts[7])
            elif len(parts) >= 5 and parts[2].startswith("R_ARM_"):
                target = parts[4].removeprefix(".text.")
                applied = section.removeprefix(".rel")  # the section the relocation patches
                if (parts[2] not in _CALL_RELOCS and applied != ".isr_vector"
                        and not applied.startswith(_NOT_RUN)
                        and target != applied.removeprefix(".text.")):
                    refs.add(target)
    return refs & functions


def stack_depth(ci_dir: Path, root: str = "main",
                indirect_targets: set[str] | None = None) -> dict[str, Any]:
    """Deepest static call chain from `root` over every .ci file in ci_dir. GCC's graph
    sends every call through a pointer to one placeholder node; it stands here for the
    deepest of `indirect_targets` (address_taken: by bare name, as static functions' nodes
    are named file:NAME), or for a leaf of LIBC_FRAME_ALLOWANCE bytes when they are unknown."""
    frames: dict[str, int] = {}
    dynamic: set[str] = set()
    calls: dict[str, set[str]] = {}
    for ci in sorted(ci_dir.glob("*.ci")):
        text = ci.read_text()
        for name, size, kind in _NODE.findall(text):
            frames[name] = int(size)
            if kind == "dynamic":
                dynamic.add(name)
        for src, dst in _EDGE.findall(text):
            calls.setdefault(src, set()).add(dst)
    if indirect_targets is not None:
        nodes = {}
        for name in frames:
            nodes.setdefault(name.rsplit(":", 1)[-1], []).append(name)
        # a target without a node (assembly) is a leaf of the allowance, as libc's are
        calls[INDIRECT_CALL] = {n for t in indirect_targets for n in nodes.get(t, [t])}
        frames[INDIRECT_CALL] = 0
    memo: dict[str, tuple[int, list[str]]] = {}

    def deepest(fn: str, seen: frozenset[str]) -> tuple[int, list[str]]:
        if fn in memo:
            return memo[fn]
        if fn in seen:  # recursion: none in our code; do not loop
            return 0, [fn + " (recursive)"]
        own = frames.get(fn, LIBC_FRAME_ALLOWANCE)
        best = (0, [])
        for callee in sorted(calls.get(fn, ())):
            d = deepest(callee, seen | {fn})
            if d[0] > best[0]:
                best = d
        name = "(through a pointer)" if fn == INDIRECT_CALL else fn.rsplit(":", 1)[-1]
        memo[fn] = (own + best[0], [name] + best[1])
        return memo[fn]

    depth, chain = deepest(root, frozenset())
    return {"bytes": depth + EXCEPTION_FRAME, "chain": chain,
            "dynamic_frames": sorted(dynamic)}


MEASURE_BYTES = 64 << 20  # regions of a measuring link: big enough for anything we generate


def measure_link(project: Path, board: Board) -> dict[str, int]:
    """Link the board's objects once more with unlimited regions, to say where the bytes go
    when the real link overflows: code, constants, and the SRAM buffers by name."""
    ld = (project / "board" / "firmware.ld").read_text()
    mem = (f"MEMORY\n{{\n    FLASH0 (rx) : ORIGIN = 0x00000000, LENGTH = {MEASURE_BYTES}\n"
           f"    RAM (rwx) : ORIGIN = 0x20000000, LENGTH = {MEASURE_BYTES}\n}}")
    ld = re.sub(r"MEMORY\s*\{.*?\n\}", mem, ld, flags=re.S)
    ld = re.sub(r"\.text[1-9] : \{[^}]*\} > FLASH[1-9]\n", "", ld)
    (project / "board" / "measure.ld").write_text(ld)
    objs = sorted(str(p) for p in (project / "su" / "board").glob("*.o"))
    elf = project / "su" / "measure.elf"
    cc = board.cc
    subprocess.run([cc, *board.cflags, "-T", str(project / "board" / "measure.ld"), "-o",
                    str(elf), *objs, "-nostartfiles", "-Wl,--gc-sections",
                    "-Wl,--no-warn-rwx-segments", "-lm"], capture_output=True, check=True)
    sizes = section_sizes(elf, cc.replace("-gcc", "-size"))
    nm = subprocess.run([cc.replace("-gcc", "-nm"), "-S", "--size-sort", str(elf)],
                        capture_output=True, text=True, check=True).stdout
    out = {"code": 0, "constants": 0, "arena": 0, "link_buffers": 0, "params_sram": 0,
           "largest": 0}
    for line in nm.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        n, kind, name = int(parts[1], 16), parts[2].lower(), parts[3]
        # .rodata is linked into the executable .text regions, so nm types constants "t" too:
        # the model's own tables are known by name (passes/memory_layout.py, codegen/context.py):
        # frozen parameters (tt_p_ in flash), initial values, constants and kernel tables
        const = kind == "r" or (kind == "t" and (
            name.startswith(("tt_c_", "tt_k", "tt_p_")) or name.endswith("_init")))
        if kind in ("t", "r"):  # any one object must fit one region whole
            out["largest"] = max(out["largest"], n)
        if kind == "t" and not const:
            out["code"] += n
        elif const:
            out["constants"] += n
        elif name.endswith("_arena"):  # tt_arena, or NAME_arena with --prefix NAME
            out["arena"] += n
        elif name in ("rx", "tx"):
            out["link_buffers"] += n
        elif kind in ("b", "d") and name.startswith(("tt_p_", "tt_g_", "tt_m_")):
            out["params_sram"] += n
    out.update(flash=sizes["flash_used"], sram=sizes["sram_used"], stack=sizes["stack_reserved"])
    out["other_sram"] = out["sram"] - out["arena"] - out["link_buffers"] - out["params_sram"] \
        - out["stack"]
    return out


def explain_overflow(project: Path, board: Board, over: list[tuple[str, str]]) -> BuildError:
    """The linker's verdict with the breakdown of both memories and advice that can work
    (a FlashOverflow when the flash is what overflowed)."""
    from tinytrain.codegen.render import flash_layout_of_project

    layout = flash_layout_of_project(project, board)
    m = measure_link(project, board)
    kb = lambda n: f"{n / 1024:.1f} KB"  # noqa: E731
    ram = board.sram_bytes or 0
    regions = " + ".join(kb(n) for _, n in layout.regions)
    verdict = ", ".join(f"region {r} overflowed by {kb(int(n))}" for r, n in over) or \
        "no flash region holds every section"
    lines = [f"the program does not fit {board.name} (the linker's verdict: {verdict})."]
    biggest = max(n for _, n in layout.regions)
    flash_over = m["flash"] > layout.program_bytes or m["largest"] > biggest
    lines.append(f"  SRAM {kb(m['sram'])} of {kb(ram)}: arena {kb(m['arena'])}, trainable "
                 f"parameters and their state {kb(m['params_sram'])}, link buffers "
                 f"{kb(m['link_buffers'])}, stack {kb(m['stack'])}, other statics "
                 f"{kb(m['other_sram'])}" + (" -- does not fit" if m["sram"] > ram else ""))
    sized = "parameters and the training state" if layout.with_state else "parameters"
    lines.append(f"  flash {kb(m['flash'])} of the program's {kb(layout.program_bytes)} "
                 f"({regions}; the rest of the {kb(board.flash_bytes or 0)} holds two "
                 f"checkpoint slots of {kb(layout.slot_bytes)} sized for the trainable "
                 f"{sized}): code {kb(m['code'])}, constants (frozen parameters, initial "
                 f"values, kernel tables) {kb(m['constants'])}, the largest single object "
                 f"{kb(m['largest'])} (the largest region {kb(biggest)})"
                 + (" -- does not fit" if flash_over else ""))
    advice = []
    if m["sram"] > ram:
        advice.append("for SRAM: a smaller --update plan (fewer trained layers or channels), "
                      "--batch 1 and no momentum (no gradient buffers or optimizer state)")
    if flash_over:
        advice.append("for flash: a smaller model (frozen parameters live in flash), an int8 "
                      "model instead of fp32, or fewer trainable bytes (smaller checkpoint "
                      "slots leave more flash to the program)")
    if advice:
        lines.append("  what would fit: " + "; ".join(advice))
    return (FlashOverflow if flash_over else BuildError)("\n".join(lines))


# The statics the plan counts (report.sram_bytes): the model's arena (PREFIX_arena), its
# trainable parameters, gradients and optimizer state (tt_p_/tt_g_/tt_m_, passes/memory_layout.py),
# and the link's request and reply buffers (firmware/tt_link.c). The stack is planned too.
PLANNED_SYMBOL = re.compile(r"[a-z][a-z0-9_]*?_(?:arena|[pgm]_\w+)|rx|tx")
RAM_SECTIONS = (".data", ".bss", ".stack")  # what section_sizes counts as static SRAM
_OUT_SECTION = re.compile(r"^(\.\S+)")
_IN_SECTION = re.compile(r"^ (\S+)?\s+0x[0-9a-f]+\s+0x([0-9a-f]+)(?:\s+(\S.*))?$")


def unplanned_sram(map_file: Path, linked: int, planned: int) -> dict[str, int]:
    """Why the linked static SRAM differs from the plan, from the linker's map: statics the
    firmware keeps besides the planned buffers (link and profiling state), the C library's
    own data (newlib, libgcc: objects from outside the project), and the rest, alignment
    padding (gaps between objects, the stack's alignment, the plan rounding a buffer to 4
    bytes). The three add up to linked - planned exactly."""
    project = map_file.resolve().parent  # the link ran there: our objects are inside it
    ours = libc = 0
    section = ""
    pending = ""  # an input section whose name filled its own line
    for line in map_file.read_text(errors="replace").splitlines():
        if line and not line[0].isspace():
            m = _OUT_SECTION.match(line)
            section = m.group(1) if m else ""
            pending = ""
            continue
        if section not in RAM_SECTIONS:
            continue
        m = _IN_SECTION.match(line)
        if m is None:
            name = line.strip()
            pending = name if line.startswith(" ") and not line.startswith("  ") and \
                " " not in name else ""
            continue
        name, size, origin = m.group(1) or pending, int(m.group(2), 16), m.group(3) or ""
        pending = ""
        if not name or name == "*fill*" or not origin:
            continue  # padding: counted as the remainder
        if ".a(" in origin or not _inside(project, origin):  # newlib, libgcc, crt files
            libc += size
        elif not PLANNED_SYMBOL.fullmatch(name.split(".", 2)[-1]):
            ours += size
    return {"firmware_state": ours, "libc": libc, "alignment": linked - planned - ours - libc}


def _inside(project: Path, origin: str) -> bool:
    return (project / origin).resolve().is_relative_to(project)
