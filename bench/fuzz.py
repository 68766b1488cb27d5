"""The long fuzzer run: model-file mutants through the compiler and gcc (tests/fuzz/run.py).

    python bench/fuzz.py                      # 10,000 mutants, seed 1, both cores
    python bench/fuzz.py --count 50000 --seed 7

Prints the outcomes per mutation family and every distinct failure; exits 1 on any
traceback, C compiler error or hang. tests/test_fuzz.py runs a short seeded run in CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz import run  # noqa: E402

if __name__ == "__main__":
    if not any(a.startswith("--count") for a in sys.argv[1:]):
        sys.argv += ["--count", "10000"]
    run.main()
