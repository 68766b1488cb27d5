"""The C runtime's layers, read from its sources (nothing is compiled here).

runtime_c/reference/ is the specification and includes nothing of runtime_c/optimized/;
runtime_c/tt_kernels.h, the header generated code includes, sits above both. Every kernel the
code generator swaps by name (codegen/context.OPTIMIZED_KERNELS: <name> -> <name>_opt) is
declared from its reference's type, so the swap cannot call a different signature. The
kernels written once for several types (the *_body.h files) are included by kernel files
only."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

from tinytrain.assets import runtime_files
from tinytrain.codegen.context import OPTIMIZED_KERNELS

RUNTIME = ROOT / "runtime_c"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _includes(p: Path) -> set[str]:
    return set(INCLUDE.findall(p.read_text()))


def test_reference_includes_only_reference() -> None:
    ref = {p.name for p in (RUNTIME / "reference").iterdir()}
    for p in sorted((RUNTIME / "reference").iterdir()):
        assert _includes(p) <= ref, (p.name, _includes(p) - ref)


def test_optimized_includes_only_the_runtime_and_the_umbrella_includes_both() -> None:
    names = set(runtime_files())
    for p in sorted((RUNTIME / "optimized").iterdir()):
        assert _includes(p) <= names, (p.name, _includes(p) - names)
    assert _includes(RUNTIME / "tt_kernels.h") == {"tt_reference.h", "tt_kernels_opt.h"}


def test_swapped_kernels_are_declared_from_their_reference() -> None:
    headers = "".join(p.read_text() for p in (RUNTIME / "optimized").glob("*.h"))
    for name in sorted(OPTIMIZED_KERNELS):
        assert f"extern __typeof__({name}) {name}_opt;" in headers, name


def test_bodies_are_included_by_kernel_files_only() -> None:
    bodies = {n for n in runtime_files() if n.endswith("_body.h")}
    assert bodies, "no shared kernel bodies found"
    users = {b: [p.name for p in runtime_files().values() if b in _includes(p)] for b in bodies}
    for b, files in users.items():
        assert len(files) >= 2 and all(f.endswith(".c") for f in files), (b, files)
