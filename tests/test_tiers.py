"""The fast tier's list of slow modules and tests (conftest.py) names what exists: a renamed
test or module would otherwise drop out of `slow` silently and slow `make test-fast` down."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import COLLECTED_MODULES, ROOT, SLOW_CASES_SEEN, SLOW_MODULES, SLOW_TESTS


def test_every_slow_module_and_test_exists():
    tests = ROOT / "tests"
    for module in SLOW_MODULES | set(SLOW_TESTS):
        assert (tests / f"{module}.py").is_file(), module
    for module, names in SLOW_TESTS.items():
        defined = set(re.findall(r"^def (test_\w+)\(", (tests / f"{module}.py").read_text(), re.M))
        functions = {n.partition("[")[0] for n in names}
        assert functions <= defined, (module, functions - defined)


def test_every_slow_case_is_collected():
    """A "name[id]" entry names a case pytest collects (an id changes with its parameters):
    checked on this session's collection (conftest records it), or on a collection of its own
    for modules this session did not collect."""
    cases = {(m, n) for m, names in SLOW_TESTS.items() for n in names if "[" in n}
    missing = {m for m, _ in cases} - COLLECTED_MODULES
    seen = set(SLOW_CASES_SEEN)
    if missing:
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                              "no:xdist", *(f"tests/{m}.py" for m in sorted(missing))],
                             cwd=ROOT, capture_output=True, text=True).stdout
        seen |= {(Path(line.partition("::")[0]).stem, line.partition("::")[2])
                 for line in out.splitlines() if "::" in line}
    assert cases <= seen, cases - seen
