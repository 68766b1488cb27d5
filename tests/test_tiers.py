"""The fast tier's list of slow modules and tests (conftest.py) names what exists: a renamed
test or module would otherwise drop out of `slow` silently and slow `make test-fast` down."""

from __future__ import annotations

import re

from conftest import ROOT, SLOW_MODULES, SLOW_TESTS


def test_every_slow_module_and_test_exists():
    tests = ROOT / "tests"
    for module in SLOW_MODULES | set(SLOW_TESTS):
        assert (tests / f"{module}.py").is_file(), module
    for module, names in SLOW_TESTS.items():
        defined = set(re.findall(r"^def (test_\w+)\(", (tests / f"{module}.py").read_text(), re.M))
        assert names <= defined, (module, names - defined)
