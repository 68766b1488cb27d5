"""A short seeded run of the compiler fuzzer (tests/fuzz/run.py; bench/fuzz.py is the long
one): every mutant of the seed models, across every mutation family, either builds to C that
gcc accepts or fails with one TinyTrainError (exit 2 from the CLI). No traceback, no C
compiler error, no hang."""

from __future__ import annotations

import shutil

import pytest

from tests.fuzz.mutate import BYTE_FAMILIES, ONNX_FAMILIES, TFLITE_FAMILIES
from tests.fuzz.run import format_report, run

COUNT = 600  # about 30 s on 2 cores; the long run is bench/fuzz.py


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_mutants_build_or_fail_cleanly():
    r = run(COUNT, seed=11, jobs=2)
    report = format_report(r)
    assert r["total"] == COUNT
    for bad in ("traceback", "c_error", "hang"):
        assert r["counts"].get(bad, 0) == 0, report
    # the run reaches every family, and both verdicts occur (the mutants are not all trivial)
    assert set(r["by_family"]) == {*BYTE_FAMILIES, *ONNX_FAMILIES, *TFLITE_FAMILIES}, report
    assert r["counts"].get("error", 0) > COUNT // 4 and r["counts"].get("built", 0) > 0, report
