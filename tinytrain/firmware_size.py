"""What the linked firmware really occupies: arm-none-eabi-size sections and a worst-case stack
depth from GCC's call graph (-fcallgraph-info=su), for report.json and the budget check."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tinytrain.errors import BuildError

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
    text = sum(v for k, v in sec.items() if k in (".isr_vector", ".text") or
               k.startswith(".ARM"))
    data, bss, stack = sec.get(".data", 0), sec.get(".bss", 0), sec.get(".stack", 0)
    return {"text": text, "data": data, "bss": bss, "stack_reserved": stack,
            "flash_used": text + data, "sram_used": data + bss + stack}


def stack_depth(ci_dir: Path, root: str = "main") -> dict[str, Any]:
    """Deepest static call chain from `root` over every .ci file in ci_dir."""
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
    memo: dict[str, tuple[int, list[str]]] = {}

    def deepest(fn: str, seen: frozenset[str]) -> tuple[int, list[str]]:
        if fn in memo:
            return memo[fn]
        if fn in seen:  # recursion: none in our code; do not loop
            return 0, [fn + " (recursive)"]
        own = frames.get(fn, LIBC_FRAME_ALLOWANCE)
        best = (0, [])
        for callee in calls.get(fn, ()):
            d = deepest(callee, seen | {fn})
            if d[0] > best[0]:
                best = d
        memo[fn] = (own + best[0], [fn.rsplit(":", 1)[-1]] + best[1])
        return memo[fn]

    depth, chain = deepest(root, frozenset())
    return {"bytes": depth + EXCEPTION_FRAME, "chain": chain,
            "dynamic_frames": sorted(dynamic)}
