"""Optimised partial-channel copies (runtime_c/optimized/tt_channels_opt.c) against the
reference ones, on the host and the Cortex-M7 / M4 twins: runs of channels (no index table)
and index tables, bit for bit, and the twins' outputs hash like the host's."""

from __future__ import annotations

import re

import pytest

from tests import ckernel

PROGRAM = ckernel.HERE / "test_channels_opt.c"
SOURCES = [ckernel.RUNTIME[f] for f in ("tt_q8_core.c", "tt_sparse_f32.c", "tt_channels_opt.c")]


def _hash(target: str, work) -> str:
    r = ckernel.run(PROGRAM, target, work, sources=SOURCES)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("OK"), r.stdout
    return re.search(r"^hash ([0-9a-f]{8})", r.stdout, re.M).group(1)


@pytest.mark.skipif(not ckernel.available("host"), reason="no host gcc")
def test_host_copies_match_reference(tmp_path):
    _hash("host", tmp_path)


@pytest.mark.skipif(not ckernel.available("host") or not ckernel.available("m7"),
                    reason="arm-none-eabi-gcc / qemu-system-arm missing")
@pytest.mark.parametrize("target", ckernel.TWINS)
def test_twin_copies_match_reference_and_host(target, tmp_path):
    assert _hash(target, tmp_path / target) == _hash("host", tmp_path / "host")
