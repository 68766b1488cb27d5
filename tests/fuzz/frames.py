"""The link fuzzer: malformed frames to a running program (the host build, best compiled with
the sanitizers: tests/sanitize.py), interleaved with the valid training samples of a clean
run. Nothing malformed may crash the program or change its state, so afterwards the
parameters must equal those of a clean run on the same samples.

Families (each frame is one of):
  garbage     random bytes, flags and escapes included
  bad_crc     a valid frame with one byte of its CRC or body changed
  bad_escape  an escape byte followed by something that is not an escaped value
  cut         a valid frame without its closing flag (the next frame starts in its middle)
  version     a valid-CRC frame with another link version
  unknown     a valid-CRC frame with a command the device does not have
  label       a valid-CRC train frame whose label is outside 0..classes-1
  nonfinite   a valid-CRC train frame whose sample holds NaN or infinities (float models)
  short       a valid-CRC train/infer frame with fewer sample bytes than the input
  long        a valid-CRC train/infer frame with more bytes than the input
  get / set   parameter reads and writes with offsets or counts outside the parameters
  state       training-state reads and writes outside the state, and writes of a pending
              count outside 0..batch-1
  lengths     get/set/profile/hello with payloads of the wrong length
  sgd         SGD scalars out of range (NaN, infinite, negative, momentum >= 1) or of the
              wrong length
Commands that legitimately change state (reset, checkpoint load/save, an in-range set of
parameters, training state or SGD scalars) are never sent as fuzz.
"""

from __future__ import annotations

import collections
import struct
import zlib

import numpy as np

from tinytrain.device.link.device import table_bytes
from tinytrain.device.link.frames import ESC, FLAG, VERSION, encode, stuff

FAMILIES = ("garbage", "bad_crc", "bad_escape", "cut", "version", "unknown", "label",
            "nonfinite", "short", "long", "get", "set", "lengths", "sgd", "state")
SAFE_UNKNOWN = [c for c in range(256) if chr(c) not in "HTIUGSCLRKPOgs" and c != 0x15]
# (lr, momentum, weight decay) the device must refuse: each has one value out of range
BAD_SGD = [(np.nan, 0, 0), (-0.1, 0, 0), (np.inf, 0, 0), (0.05, 1.0, 0), (0.05, -0.5, 0),
           (0.05, np.nan, 0), (0.05, 0, -1e-3), (0.05, 0, np.inf), (-np.inf, 2.0, np.nan)]
DRAIN_SECONDS = 0.02  # wait for whatever the device answers a fuzz frame before going on


def _frame(seq: int, cmd: int, payload: bytes, version: int = VERSION) -> bytes:
    return encode(seq, cmd, payload, version)


def _raw(body: bytes) -> bytes:
    return bytes([FLAG]) + stuff(body + struct.pack("<I", zlib.crc32(body))) + bytes([FLAG])


def fuzz_frame(family: str, rng: np.random.Generator, seq: int, info: dict,
               sample: bytes, trainable_bytes: int) -> bytes:
    """One malformed frame of `family` (sample: a valid encoded input, for the train ones)."""
    label_ok = struct.pack("<i", 0)
    classes = int(np.prod(info["output_shape_ir"]))
    if family == "garbage":
        n = int(rng.integers(1, 300))
        b = bytearray(rng.bytes(n))
        for _ in range(int(rng.integers(0, 4))):
            b[int(rng.integers(n))] = int(rng.choice([FLAG, ESC]))
        return bytes(b)
    if family == "bad_crc":
        f = bytearray(_frame(seq, ord("T"), label_ok + sample))
        k = int(rng.integers(1, len(f) - 1))
        f[k] = (f[k] + 1 + int(rng.integers(250))) % 256
        if f[k] in (FLAG, ESC):
            f[k] = 0x55
        return bytes(f)
    if family == "bad_escape":
        f = _frame(seq, ord("K"), b"")
        return f[:3] + bytes([ESC, 0x00]) + f[3:]
    if family == "cut":
        f = _frame(seq, ord("T"), label_ok + sample)
        return f[:int(rng.integers(1, len(f) - 1))]
    if family == "version":
        other = [0, 1, VERSION - 1, VERSION + 1, 255]
        return _frame(seq, ord("K"), b"", version=int(rng.choice(other)))
    if family == "unknown":
        return _frame(seq, int(rng.choice(SAFE_UNKNOWN)), rng.bytes(int(rng.integers(0, 40))))
    if family == "label":
        bad = int(rng.choice([classes, -1, 1 << 20, -(1 << 31), (1 << 31) - 1]))
        return _frame(seq, ord("T"), struct.pack("<i", bad) + sample)
    if family == "nonfinite":
        if info.get("input_dtype", "f32") != "f32":
            return _frame(seq, ord("T"), struct.pack("<i", classes) + sample)
        x = np.frombuffer(sample, np.float32).copy()
        x[rng.integers(0, x.size, 1 + int(rng.integers(x.size)))] = \
            rng.choice([np.nan, np.inf, -np.inf])
        cmd = ord(rng.choice(["T", "I"]))  # the device refuses both
        return _frame(seq, cmd, (label_ok if cmd == ord("T") else b"") + x.tobytes())
    if family == "short":
        cmd = ord(rng.choice(["T", "I"]))
        head = label_ok if cmd == ord("T") else b""
        return _frame(seq, cmd, head + sample[:int(rng.integers(0, len(sample)))])
    if family == "long":
        cmd = ord(rng.choice(["T", "I"]))
        head = label_ok if cmd == ord("T") else b""
        return _frame(seq, cmd, head + sample + rng.bytes(int(rng.integers(1, 64))))
    if family == "get":
        off = int(rng.choice([trainable_bytes, trainable_bytes + 1, 1 << 31, (1 << 32) - 1,
                              max(0, trainable_bytes - 1)]))
        cnt = int(rng.choice([257, 65535, 300, 2]))
        if off + min(cnt, 256) <= trainable_bytes and cnt <= 256:
            cnt = 257
        return _frame(seq, ord("G"), struct.pack("<IH", off, cnt))
    if family == "set":
        off = int(rng.choice([trainable_bytes, trainable_bytes - 1, 1 << 31, (1 << 32) - 1]))
        n = int(rng.choice([2, 16, 257, 300]))
        if 0 <= off and off + n <= trainable_bytes and n <= 256:
            n = 257
        return _frame(seq, ord("S"), struct.pack("<I", off % (1 << 32)) + rng.bytes(n))
    if family == "lengths":
        cmd = rng.choice(["G", "S", "P"])
        n = {"G": [0, 5, 7, 100], "S": [0, 1, 3], "P": [0, 1, 3, 9]}[cmd]
        return _frame(seq, ord(cmd), rng.bytes(int(rng.choice(n))))
    if family == "state":
        total = table_bytes(info["state"])
        batch = int((info.get("sgd") or {}).get("batch", 1))
        kind = int(rng.integers(3))
        if kind == 0:  # a read past the state, or longer than a chunk
            off = int(rng.choice([total, total + 1, 1 << 31, (1 << 32) - 1]))
            return _frame(seq, ord("g"), struct.pack("<IH", off, int(rng.choice([4, 257]))))
        if kind == 1:  # a write past the state
            off = int(rng.choice([total, total - 1, 1 << 31, (1 << 32) - 1]))
            return _frame(seq, ord("s"), struct.pack("<I", off) + rng.bytes(8))
        pending = int(rng.choice([batch, batch + 1, -1, (1 << 31) - 1, -(1 << 31)]))
        return _frame(seq, ord("s"), struct.pack("<Ii", 0, pending) + rng.bytes(12))
    if family == "sgd":
        if rng.random() < 0.25:
            return _frame(seq, ord("O"), rng.bytes(int(rng.choice([1, 4, 8, 11, 13, 24]))))
        return _frame(seq, ord("O"), struct.pack("<3f", *BAD_SGD[rng.integers(len(BAD_SGD))]))
    raise ValueError(family)


def _drain(dev, seconds: float) -> None:
    """Read and drop whatever the device sends for a while (replies to fuzz, NAKs)."""
    dev.transport.read(seconds)


def run_frames(dev, count: int, seed: int, x: np.ndarray, y: np.ndarray) -> dict:
    """Send `count` malformed frames, a valid training sample after every few; returns the
    counts per family and the parameters after the valid samples."""
    rng = np.random.default_rng(seed)
    info = dev.info
    trainable_bytes = dev.device.trainable_bytes
    sent: collections.Counter = collections.Counter()
    step = 0
    per_sample = max(1, count // len(x))
    for k in range(count):
        family = FAMILIES[k % len(FAMILIES)]
        i = step % len(x)
        seq = (dev._seq + 2 + int(rng.integers(0, 60000))) & 0xFFFF  # never the next request's
        frame = fuzz_frame(family, rng, seq, info, dev.encode_input(x[i]), trainable_bytes)
        dev.transport.write(frame)
        if family in ("cut", "garbage", "bad_escape"):
            dev.transport.write(bytes([FLAG]))  # end whatever the device is in the middle of
        _drain(dev, DRAIN_SECONDS)
        sent[family] += 1
        if (k + 1) % per_sample == 0 and step < len(x):
            dev.train(x[step], y[step])
            step += 1
    while step < len(x):
        dev.train(x[step], y[step])
        step += 1
    return {"sent": dict(sent), "params": dev.get_params(), "stats": dev.device_stats()}


def fuzz_against_clean(build, frames: int, seed: int, x: np.ndarray, y: np.ndarray,
                       log) -> dict | None:
    """Train x, y on a clean run of the host build in `build`, then rebuild it with the
    sanitizers and fuzz it (run_frames) with the same samples in between; returns run_frames'
    result plus the clean parameters ("want"), the sanitizer reports and the host's link
    statistics, or None when this gcc has no sanitizer runtime."""
    from tests import sanitize
    from tinytrain.device.runner import HostProgram

    with HostProgram(build) as clean:
        for xi, yi in zip(x, y, strict=True):
            clean.train(xi, yi)
        want = clean.get_params()
    if not sanitize.rebuild(build):
        return None
    with HostProgram(build, env=sanitize.env(log)) as dev:
        r = run_frames(dev, frames, seed, x, y)
        link = dev.stats
    return {**r, "want": want, "reports": sanitize.reports(log), "link": link,
            "same": all(np.array_equal(r["params"][k], want[k]) for k in want)}
