"""Kernels under the board's flash: which optimised kernel families a build keeps generic.

The optimised kernels (runtime_c/optimized/) are faster and bigger than the portable ones: a
family such as the int8 pointwise conv brings its own blocks, assembly and constant tables.
When a build's program overflows the board's flash, it gives families back to the generic
kernels, as it gives memory passes to its SRAM budget: of the sets of families that free
what the program lacks, the one whose layers do the least work per step (MACs, or elements
for an op without MACs) is kept generic; then it links again, which is the verdict.

What a family frees is read off the build itself: function sizes from the objects
(`nm -S`), calls from GCC's call graph (-fcallgraph-info), so a helper two families share
stays until both are gone, and a generic kernel the model does not call yet counts against
the saving. Tables a family alone reads (the depthwise packs) are in kernels.json.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tinytrain.boards import Board
from tinytrain.device.firmware_size import _EDGE, _NODE, measure_link
from tinytrain.errors import FlashOverflow

# A relink after the choice is the verdict (and a miss gives up one family more); the
# estimate aims this far under the limit for alignment and the split between flash regions.
# Measured: MCUNet-5FPS's 148 KB scheme on the STM32F746, 104.7 KB estimated, 104.8 KB freed.
MARGIN_BYTES = 1024
CHOICE_UNIT = 64  # bytes: the cover is exact to this (a family freeing less is never chosen)
_CONV_FAMILY = re.compile(r"^tt_conv2d_s8_(pw|reg|dw)(_pk)?")


@dataclass(frozen=True)
class Family:
    name: str  # the optimised function (tt_dense_s8_opt) or conv variant (tt_conv2d_s8_dw)
    layers: tuple[str, ...]
    work: int  # per training step over the layers that call it: MACs, or output elements
    freed: int  # bytes of flash the build frees by keeping it generic (estimate)


def generic_name(fn: str) -> str:
    """The portable kernel an optimised entry point stands in for."""
    return _CONV_FAMILY.sub("tt_conv2d_s8", fn).replace("_opt", "")


class CallGraph:
    """The build's functions (bytes each) and calls, from its objects and .ci files."""

    def __init__(self, obj_dir: Path, nm: str) -> None:
        self.size: dict[str, int] = {}
        self.calls: dict[str, set[str]] = {}
        self.defined: dict[str, set[str]] = {}  # object stem -> its functions
        for obj in sorted(obj_dir.glob("*.o")):
            out = subprocess.run([nm, "-S", "--defined-only", str(obj)], capture_output=True,
                                 text=True, check=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 4 and parts[2] in "tT":
                    # static functions are named file:NAME in the call graph
                    key = parts[3] if parts[2] == "T" else f"{obj.stem}:{parts[3]}"
                    self.size[key] = self.size.get(key, 0) + int(parts[1], 16)
                    self.defined.setdefault(obj.stem, set()).add(key)
        for ci in sorted(obj_dir.glob("*.ci")):
            text = ci.read_text()
            for name, _, _ in _NODE.findall(text):
                self.calls.setdefault(self._key(name), set())
            for src, dst in _EDGE.findall(text):
                self.calls.setdefault(self._key(src), set()).add(self._key(dst))

    @staticmethod
    def _key(node: str) -> str:
        """A .ci node title ('../../runtime/tt_x.c:helper' or 'tt_kernel') as size's key."""
        if ":" not in node:
            return node
        path, fn = node.rsplit(":", 1)
        return f"{Path(path).stem}:{fn}"

    def reach(self, roots: set[str], blocked: set[str] = frozenset()) -> set[str]:
        seen: set[str] = set()
        todo = [r for r in roots if r not in blocked]
        while todo:
            fn = todo.pop()
            if fn in seen:
                continue
            seen.add(fn)
            todo.extend(c for c in self.calls.get(fn, ()) if c not in blocked and c not in seen)
        return seen

    def bytes(self, fns: set[str]) -> int:
        return sum(self.size.get(f, 0) for f in fns)


def model_entries(graph: CallGraph, family: str) -> set[str]:
    """The functions of `family` that model.c calls (a conv family's row and packed forms)."""
    called = set().union(*(graph.calls.get(k, set()) for k in graph.defined.get("model", ())))
    return {f for f in called if f == family or (
        _CONV_FAMILY.match(f) and _CONV_FAMILY.match(f).group(0).replace("_pk", "") == family)}


def families(obj_dir: Path, nm: str, sites: dict) -> list[Family]:
    """Each optimised family of kernels.json with the flash keeping it generic would free."""
    graph = CallGraph(obj_dir, nm)
    roots = {"main", "Reset_Handler"} | graph.defined.get("model", set())
    linked = graph.reach(roots)
    out = []
    for name, s in sites["optimized"].items():
        entries = model_entries(graph, name)
        kept = graph.reach(roots, blocked=entries)
        generic = graph.reach({generic_name(e) for e in entries}) - linked
        freed = graph.bytes(linked - kept) - graph.bytes(generic) + s["table_bytes"]
        out.append(Family(name, tuple(s["layers"]), s["work"], freed))
    return out


def choose(fams: list[Family], need: int) -> list[Family]:
    """The families to keep generic that free at least `need` (+ MARGIN_BYTES) bytes with the
    least work per step among them (their layers run generic kernels): a minimum-cost cover,
    exact over the freed bytes in CHOICE_UNIT steps (rounded down, so never short). Empty when
    even all of them would not free enough."""
    useful = sorted((f for f in fams if f.freed >= CHOICE_UNIT), key=lambda f: f.name)
    target = -(-(need + MARGIN_BYTES) // CHOICE_UNIT)
    if target <= 0:
        return []
    # best[c]: (work, families, mask) of the cheapest set freeing >= c units (c capped)
    best: dict[int, tuple[int, int, int]] = {0: (0, 0, 0)}
    for i, f in enumerate(useful):
        units = f.freed // CHOICE_UNIT
        for c, (work, n, mask) in sorted(best.items(), reverse=True):
            to = min(target, c + units)
            cand = (work + f.work, n + 1, mask | 1 << i)
            if to not in best or cand < best[to]:
                best[to] = cand
    if target not in best:
        return []
    mask = best[target][2]
    return [f for i, f in enumerate(useful) if mask >> i & 1]


def code_by_object(map_file: Path) -> dict[str, int]:
    """Bytes of code each of the project's objects puts in the linked program (its .text
    input sections in the linker's map), largest first: the code size by kernel family."""
    sizes: dict[str, int] = {}
    pending = ""
    text = map_file.read_text(errors="replace")  # after the sections gc-sections discarded:
    for line in text.split("Linker script and memory map", 1)[-1].splitlines():
        m = re.match(r"^ (\.text\S*)(?:\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+(\S+))?\s*$", line)
        if m and m.group(2) is None:  # a long section name: the figures are on the next line
            pending = m.group(1)
            continue
        if pending:
            m2 = re.match(r"^\s+0x[0-9a-f]+\s+0x([0-9a-f]+)\s+(\S+)\s*$", line)
            pending = ""
            if m2:
                _add(sizes, m2.group(2), int(m2.group(1), 16))
            continue
        if m:
            _add(sizes, m.group(3), int(m.group(2), 16))
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


def _add(sizes: dict[str, int], obj: str, n: int) -> None:
    if n == 0 or not obj.endswith(".o") or "/" in obj.removeprefix("su/board/"):
        name = "libc, libm, libgcc" if n and ".a(" in obj else ""
        if name:
            sizes[name] = sizes.get(name, 0) + n
        return
    stem = Path(obj).stem
    sizes[stem] = sizes.get(stem, 0) + n


def fit_kernels(project: Path, board: Board, generic: list[Family],
                overflow: FlashOverflow) -> list[Family]:
    """The families to keep generic after a link of `project` overflowed the flash: the
    ones already kept and enough more to free what the program lacks (the overflow itself
    when none is left to give)."""
    from tinytrain.codegen.render import KERNELS_JSON, flash_layout_of_project

    sites = json.loads((project / KERNELS_JSON).read_text())
    m, layout = measure_link(project, board), flash_layout_of_project(project, board)
    if m["largest"] > max(n for _, n in layout.regions):
        raise overflow  # one object (a frozen weight) fits no region: kernels cannot help
    need = m["flash"] - layout.program_bytes
    fams = families(project / "su" / "board", board.cc.replace("-gcc", "-nm"), sites)
    more = choose(fams, max(need, 0))  # (kernels.json lists only the optimised ones)
    if not more:
        raise overflow
    return generic + more


def kernel_report(project: Path, generic: list[Family]) -> dict:
    """report.json's kernels: the families kept generic to fit the flash, with the layers
    they serve, the optimised ones, and the linked code by object (kernel family)."""
    from tinytrain.codegen.render import KERNELS_JSON

    sites = json.loads((project / KERNELS_JSON).read_text())
    return {"generic": [{"family": f.name, "layers": list(f.layers), "work": f.work,
                         "freed_estimate": f.freed} for f in generic],
            "optimized": sorted(sites["optimized"]),
            "code_by_object": code_by_object(project / "firmware.map")}
