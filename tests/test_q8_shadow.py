"""`--rounding shadow`'s update rule: each trained int8 weight w keeps a byte s of 1/256-LSB
fractions, the master 256 w + s moves by the step rounded to 1/256 LSB and saturates at
+-127 LSB, and the forward reads its floor. The numpy reference (tinytrain/quant/update.py) is
checked against that definition over every state, and the C reference (tt_q8_core.c) against
numpy bit for bit on the host and the twins, edges included: saturation, steps whose 256-fold
overflows an int32, infinities and NaN (the training tests compare whole runs with numpy)."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

from tests import ckernel
from tinytrain.quant.update import _roundf, update_s8

MASTER_LIMIT = 127 * 256  # the master saturates at +-127 LSB
# the steps tests/ckernel/test_shadow.c applies to every state, then +inf and NaN
DELTAS = [0.0, 0.001953125, -0.001953125, 0.0019, 0.3, -0.49, 0.5, -0.5, 1.7, -3.2, 127.5,
          300.0, -511.9, 512.5, -1e7, 3e9, 1e-30, np.inf, np.nan]
TWIN = "needs arm-none-eabi-gcc and QEMU"


def _states() -> tuple[np.ndarray, np.ndarray]:
    """Every (int8 weight in [-127, 127], shadow byte) pair, weight-major."""
    w, s = np.meshgrid(np.arange(-127, 128), np.arange(256), indexing="ij")
    return w.ravel().astype(np.int8), s.ravel().astype(np.uint8)


def _updated(d: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The numpy reference's (new weight, new shadow byte) of every state after step d."""
    w, s = _states()
    shadow = s.copy()
    q = update_s8(w, np.full(w.shape, d, np.float32), "shadow", 0, 0, np.arange(w.size), shadow)
    return q, shadow


def test_the_master_moves_by_the_step_and_the_forward_reads_its_floor() -> None:
    w, s = _states()
    for d in np.array(DELTAS, np.float32):
        q, shadow = _updated(d)
        # NaN is no step, an infinite one saturates
        lsb = np.clip(np.nan_to_num(d, nan=0.0, posinf=512.0, neginf=-512.0), -512, 512)
        step = _roundf(np.float32(lsb) * np.float32(256))
        master = np.clip(w.astype(np.int64) * 256 + s - step, -MASTER_LIMIT, MASTER_LIMIT)
        assert np.array_equal(q.astype(np.int64) * 256 + shadow, master), d
        assert np.array_equal(q.astype(np.int64), np.floor(master / 256)), d


@functools.cache
def _numpy_hash() -> str:
    """test_shadow.c's hash (FNV-1a over each case's new weight and shadow byte), from numpy."""
    h = 2166136261
    for d in np.array(DELTAS, np.float32):
        q, shadow = _updated(d)
        for b in np.stack([q.view(np.uint8), shadow], 1).ravel():
            h = ((h ^ int(b)) * 16777619) & 0xFFFFFFFF
    return f"{h:08x}"


@pytest.mark.parametrize("target", [
    "host",
    pytest.param("m7", marks=pytest.mark.skipif(not ckernel.available("m7"), reason=TWIN)),
    pytest.param("m4", marks=pytest.mark.skipif(not ckernel.available("m4"), reason=TWIN)),
    pytest.param("m55", marks=pytest.mark.skipif(not ckernel.available("m55"), reason=TWIN)),
])
def test_the_c_update_is_the_numpy_one(target, tmp_path) -> None:
    r = ckernel.run(ckernel.HERE / "test_shadow.c", target, tmp_path,
                    sources=[ckernel.RUNTIME["tt_q8_core.c"]])
    m = re.search(r"shadow: (\d+) cases, hash ([0-9a-f]{8})", r.stdout)
    assert r.returncode == 0 and m, r.stdout[-2000:]
    assert int(m.group(1)) == len(DELTAS) * 255 * 256
    assert m.group(2) == _numpy_hash()
