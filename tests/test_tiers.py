"""The fast tier's list of slow modules and tests (conftest.py) names what exists: a renamed
test or module would otherwise drop out of `slow` silently and slow `make test-fast` down."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, SLOW_MODULES, SLOW_TESTS


def test_every_slow_module_and_test_exists():
    tests = ROOT / "tests"
    for module in SLOW_MODULES | set(SLOW_TESTS):
        assert (tests / f"{module}.py").is_file(), module
    for module, names in SLOW_TESTS.items():
        defined = set(re.findall(r"^def (test_\w+)\(", (tests / f"{module}.py").read_text(), re.M))
        functions = {n.partition("[")[0] for n in names}
        assert functions <= defined, (module, functions - defined)


def test_every_slow_case_is_collected():
    """A "name[id]" entry names a case pytest collects (an id changes with its parameters)."""
    modules = [f"tests/{m}.py" for m, names in SLOW_TESTS.items() if any("[" in n for n in names)]
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
                          *modules], cwd=ROOT, capture_output=True, text=True).stdout
    cases = {(Path(line.partition("::")[0]).stem, line.partition("::")[2])
             for line in out.splitlines() if "::" in line}
    for module, names in SLOW_TESTS.items():
        for name in names:
            if "[" in name:
                assert (module, name) in cases, (module, name)
