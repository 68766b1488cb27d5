"""A device running tinytrain firmware, driven over the link: retries, sequence numbers, and
the commands of firmware/tt_link.c. The same class serves the host build, the QEMU twins and
the boards; only the transport differs."""

from __future__ import annotations

import random
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinytrain.device.link.frames import NAK, OLDEST, SINCE, VERSION, FrameReader, encode
from tinytrain.device.link.transport import LinkError, Transport
from tinytrain.quant.fixedpoint import quantize

CHUNK = 256  # TT_LINK_CHUNK: parameter bytes per get/set request (the device's maximum)
MIN_CHUNK = 16  # the smallest chunk the link shrinks to on a noisy line
# a receive's piece ends at a tensor's end or a multiple of this into it (tt_checkpoint.h
# TT_CKPT_RECEIVE_PIECE: each piece is programmed to flash as it comes, in whole write units)
RECEIVE_PIECE = 32
# Parameter chunks after which a clean line earns a doubled chunk size again.
CLEAN_TO_GROW = 8
# Bytes per second of the slowest line we drive (115200 baud, 8N1): until a command's round
# trip has been measured, its first request waits for its bytes at this pace.
LINE_RATE = 11_520
# A request waits this many times the slowest recent clean round trip of its command.
RTT_MARGIN = 3.0
PROFILE_CHUNK = 64  # op counters per profile reply
# Statuses (firmware/tt_link.h)
OK, UNKNOWN_CMD, BAD_LENGTH, BAD_ARG, CKPT_ERROR, CKPT_NONE, BAD_VERSION, REFUSED = range(8)
STATUS_TEXT = {UNKNOWN_CMD: "unknown command", BAD_LENGTH: "wrong payload length",
               BAD_ARG: "argument out of range", CKPT_ERROR: "checkpoint failed",
               CKPT_NONE: "no valid checkpoint", BAD_VERSION: "link version mismatch",
               REFUSED: "an SGD scalar was refused"}
SGD_SCALARS = ("lr", "momentum", "weight_decay")  # the 'O' command's order
# model.h's setter errors, as the 'O' command reports them
SETTER_ERRORS = {3: "out of range (lr >= 0, 0 <= momentum < 1, weight decay >= 0, finite)",
                 4: "not usable by this build (int8 parameters train with plain SGD; momentum "
                    "needs the buffers a build with --momentum > 0 has, and an Adam build "
                    "has none)"}
CKPT_ERRORS = {-1: "this board has no checkpoint flash",
               -2: "the board's flash write unit is not supported",
               -3: "the parameters do not fit a slot", -4: "erasing flash failed",
               -5: "programming flash failed", -6: "read-back verification failed",
               -7: "received bytes out of order, a piece ending inside a tensor off a "
                   "32-byte boundary, or a commit before all of them arrived"}
NP_TYPES = {"f32": np.float32, "s8": np.int8, "s32": np.int32, "u8": np.uint8}
# Attempts per request before the link is declared down. Each failed attempt costs at most
# one timeout; a NAK or a corrupted reply triggers the next attempt at once.
MAX_ATTEMPTS = 40


@dataclass
class LinkStats:
    """What the host saw: resends and why."""
    requests: int = 0
    resends: int = 0
    naks: int = 0
    timeouts: int = 0
    stale: int = 0  # replies to an earlier request (a duplicate answer), ignored
    crc_errors: int = 0
    bad_frames: int = 0


def _whole(p: dict, stored: np.ndarray) -> np.ndarray:
    """A weight split by passes/split_weights is stored as its trained input channels only;
    put the frozen rest (program.json) back around them."""
    packed = p.get("packed")
    if packed is None:
        return stored
    whole = np.zeros(p["shape"], stored.dtype)
    rest = [c for c in range(whole.shape[-1]) if c not in set(packed["channels"])]
    whole[..., rest] = np.asarray(packed["rest"], stored.dtype).reshape(
        whole.shape[:-1] + (len(rest),))
    whole[..., packed["channels"]] = stored
    return whole


# What a tick of the device's counter is (the hello's last field; firmware/tt_port.h)
TICKS_UNKNOWN, TICKS_CYCLES, TICKS_SYSTICK, TICKS_NS = 0, 1, 2, 3


@dataclass
class DeviceInfo:
    link_version: int
    model_id: int
    arena_bytes: int
    trainable_bytes: int
    input_size: int
    output_size: int
    target_bytes: int
    batch: int
    tick_bits: int
    profile_ops: int
    board: str
    tick_unit: int = TICKS_UNKNOWN  # TICKS_*: what the train replies' and profile's ticks are
    received_bytes: int = 0  # bytes of received tensors (--receive)


@dataclass
class TrainResult:
    loss: float
    pred: int
    updated: bool
    skipped: bool
    ticks: int


class VersionMismatch(LinkError):
    """The device answered status 6: it speaks link version `theirs`."""

    def __init__(self, theirs: int | None) -> None:
        self.theirs = theirs
        newer = theirs is not None and theirs > VERSION
        super().__init__(
            f"the device speaks link version {'?' if theirs is None else theirs}, this "
            f"tinytrain speaks {OLDEST} to {VERSION}; "
            + ("upgrade tinytrain, or rebuild the program with this one and flash it" if newer
               else "rebuild the program with this tinytrain and flash it"))


@dataclass
class Device:
    transport: Transport
    info: dict[str, Any]  # the build's program.json
    timeout: float = 2.0  # seconds before a request is sent again
    stats: LinkStats = field(default_factory=LinkStats)

    def __post_init__(self) -> None:
        self._reader = FrameReader()
        self._rtt: dict[str, float] = {}  # command -> slowest recent clean round trip (s)
        self.chunk = CHUNK  # parameter bytes per get/set request, adapted to the line
        self._clean_chunks = 0
        self.last_attempts = 0  # sends the last request took
        self._seq = random.randrange(1 << 16)
        self.version = VERSION  # the link version of this session: the device's, if older
        self.device = self.hello()
        want = self.info.get("model_id")
        if want is not None and self.device.model_id != want:
            raise LinkError(
                f"the device runs another model (id {self.device.model_id:08x}, board "
                f"'{self.device.board}'); this build is {want:08x}. Flash this build first "
                "(`tinytrain flash DIR --port PORT`)")

    # ---- the request/response core ----
    def request(self, cmd: str, payload: bytes = b"", timeout: float | None = None) -> bytes:
        """Send one request until its reply arrives; returns the reply payload after the
        status byte. Retransmissions reuse the sequence number, so the device answers a
        repeat from its copy instead of executing it again."""
        need, what = SINCE.get(cmd, (OLDEST, ""))
        if need > self.version:
            raise LinkError(f"the device's firmware speaks link version {self.version}, which "
                            f"has no '{cmd}' command ({what}): that needs link version {need}. "
                            "Rebuild the program with this tinytrain and flash it "
                            "(`tinytrain flash DIR --port PORT`)")
        self._seq = (self._seq + 1) & 0xFFFF
        frame = encode(self._seq, ord(cmd), payload, self.version)
        wait = self._wait(cmd, len(frame)) if timeout is None else timeout
        self.stats.requests += 1
        self.last_attempts = 0
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                self.stats.resends += 1
            self.last_attempts = attempt + 1
            t0 = time.monotonic()
            self.transport.write(frame)
            reply = self._await(ord(cmd), t0 + wait)
            if reply is not None:
                if attempt == 0:  # a clean round trip: the pace of this command
                    rtt = time.monotonic() - t0
                    self._rtt[cmd] = max(rtt, 0.9 * self._rtt.get(cmd, 0.0))
                return self._check(cmd, reply)
        raise LinkError(f"the device did not answer command '{cmd}' after {MAX_ATTEMPTS} "
                        f"attempts ({self.stats.timeouts} timeouts, {self.stats.naks} NAKs, "
                        f"{self.stats.crc_errors} corrupted replies so far)")

    def _wait(self, cmd: str, frame_bytes: int) -> float:
        """Seconds before a request is sent again: never less than `timeout`; a command not
        yet measured also gets its bytes' time on a slow UART (a 192 KB sample: 17 s), one
        measured gets RTT_MARGIN times its slowest recent clean round trip."""
        seen = self._rtt.get(cmd)
        if seen is None:
            return self.timeout + frame_bytes / LINE_RATE
        return max(self.timeout, RTT_MARGIN * seen)

    def _await(self, cmd: int, deadline: float) -> bytes | None:
        """The reply to the current request, or None when it is time to resend."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stats.timeouts += 1
                return None
            data = self.transport.read(left)
            crc0, bad0 = self._reader.crc_errors, self._reader.bad_frames
            frames = self._reader.feed(data) if data else []
            self.stats.crc_errors = self._reader.crc_errors
            self.stats.bad_frames = self._reader.bad_frames
            nak = False
            for f in frames:  # a reply beats a NAK that arrived with it (the NAK was for noise)
                if f.cmd == NAK:
                    self.stats.naks += 1
                    nak = True
                elif f.seq == self._seq and f.cmd == cmd | 0x80:
                    return f.payload
                else:
                    self.stats.stale += 1
            if nak or self._reader.crc_errors != crc0 or self._reader.bad_frames != bad0:
                return None  # our reply may have been the broken frame: ask again now

    def _check(self, cmd: str, reply: bytes) -> bytes:
        if not reply:
            raise LinkError(f"empty reply to command '{cmd}'")
        status, data = reply[0], reply[1:]
        if status == OK:
            return data
        if status == BAD_VERSION:
            raise VersionMismatch(data[0] if data else None)
        if status == CKPT_ERROR:
            (code,) = struct.unpack("<i", data[:4])
            raise LinkError(f"checkpoint failed: {CKPT_ERRORS.get(code, f'error {code}')}")
        if status == REFUSED and len(data) == 2 and data[0] < len(SGD_SCALARS):
            raise LinkError(f"the device refused {SGD_SCALARS[data[0]]}: "
                            f"{SETTER_ERRORS.get(data[1], f'error {data[1]}')}; nothing changed")
        raise LinkError(f"the device refused command '{cmd}': "
                        f"{STATUS_TEXT.get(status, f'status {status}')}")

    # ---- commands ----
    def hello(self) -> DeviceInfo:
        """Start a session; firmware of an older link version (OLDEST or later) is spoken to
        in its own version, and a command it lacks is refused by name (request)."""
        try:
            data = self.request("H")
        except VersionMismatch as e:
            if e.theirs is None or not OLDEST <= e.theirs < self.version:
                raise
            self.version = e.theirs
            data = self.request("H")
        v = struct.unpack_from("<10I", data)
        board = data[40:56].split(b"\0", 1)[0].decode("ascii", "replace")
        unit = struct.unpack_from("<I", data, 56)[0] if len(data) >= 60 else TICKS_UNKNOWN
        received = struct.unpack_from("<I", data, 60)[0] if len(data) >= 64 else 0
        return DeviceInfo(*v, board=board, tick_unit=unit, received_bytes=received)

    def train(self, x: np.ndarray, target: np.ndarray) -> tuple[float, int, bool]:
        r = self.train_full(x, target)
        return r.loss, r.pred, r.updated

    def train_full(self, x: np.ndarray, target: np.ndarray) -> TrainResult:
        label = self.info["target_dtype"] == "s32"
        t = np.asarray(target)
        if t.dtype.kind not in ("iu" if label else "iuf"):
            raise LinkError(f"target has dtype {t.dtype}: " + (
                "a label is an int32 class index" if label else "mse targets are real numbers"))
        t = np.asarray(t, np.int32 if label else np.float32)
        if t.nbytes != self.device.target_bytes:  # the device would answer "wrong length"
            raise LinkError(f"target has {t.size} values, the program expects "
                            f"{self.device.target_bytes // 4}")
        data = self.request("T", t.tobytes() + self.encode_input(x))
        loss, pred, upd, skipped, _, ticks = struct.unpack("<fiBBHI", data)
        return TrainResult(loss, pred, bool(upd), bool(skipped), ticks)

    def apply_update(self) -> None:
        self.request("U")

    def infer(self, x: np.ndarray) -> np.ndarray:
        return np.frombuffer(self.request("I", self.encode_input(x)), np.float32)

    def encode_input(self, x: np.ndarray) -> bytes:
        """The sample as it crosses the link: in the model input's own dtype. An int8 model
        takes int8 codes as they are, and real values (any float array) quantised with the
        input's scale and zero point exactly as TFLite's QUANTIZE does. The sample is already
        in the IR layout (NHWC, flattened is fine); tinytrain.device.online and
        tinytrain.device.data check the model's own layout before they get here
        (tinytrain.device.samples)."""
        a = np.asarray(x)
        if a.dtype.kind not in "iuf":  # numpy would parse strings and drop imaginary parts
            raise LinkError(f"sample has dtype {a.dtype}: inputs must be real numbers "
                            "(float32, or int8 codes for an int8 model)")
        if a.size != self.device.input_size:
            raise LinkError(f"sample has {a.size} values, the program expects "
                            f"{self.device.input_size}")
        if self.info.get("input_dtype", "f32") != "s8":
            f = np.ascontiguousarray(a, np.float32).reshape(-1)
            bad = ~np.isfinite(f)
            if bad.any():
                k = int(np.argmax(bad))
                raise LinkError(f"sample value {k} is {f[k]}: inputs must be finite")
            return f.tobytes()
        if a.dtype == np.int8:
            return a.reshape(-1).tobytes()
        return quantize_input(a, self.info["input_quant"]).tobytes()

    def reset(self) -> None:
        self.request("R")

    def _adapt_chunk(self) -> None:
        """Halve the chunk after a parameter request that needed resending (on a line that
        damages 1 % of bytes a 256-byte reply gets through ~7 % of the time, a 32-byte one
        ~64 %); double it again after CLEAN_TO_GROW clean ones."""
        if self.last_attempts > 1:
            self.chunk, self._clean_chunks = max(MIN_CHUNK, self.chunk // 2), 0
        else:
            self._clean_chunks += 1
            if self._clean_chunks >= CLEAN_TO_GROW and self.chunk < CHUNK:
                self.chunk, self._clean_chunks = min(CHUNK, self.chunk * 2), 0

    def read_param_bytes(self) -> bytes:
        return self._read_table("G", self.device.trainable_bytes)

    def write_param_bytes(self, raw: bytes) -> None:
        if len(raw) != self.device.trainable_bytes:
            raise LinkError(f"{len(raw)} parameter bytes, the device holds "
                            f"{self.device.trainable_bytes}")
        self._write_table("S", raw)

    def _read_table(self, cmd: str, n: int) -> bytes:
        off, parts = 0, []
        while off < n:
            k = min(self.chunk, n - off)
            parts.append(self.request(cmd, struct.pack("<IH", off, k)))
            off += k
            self._adapt_chunk()
        return b"".join(parts)

    def _write_table(self, cmd: str, raw: bytes) -> None:
        off = 0
        while off < len(raw):
            k = min(self.chunk, len(raw) - off)
            self.request(cmd, struct.pack("<I", off) + raw[off:off + k])
            off += k
            self._adapt_chunk()

    def get_state(self) -> dict[str, np.ndarray] | None:
        """The training state besides the parameters (model.h NAME_state): the samples
        pending toward the next update, gradient accumulators, momentum buffers, int8 shadow
        bytes, the stochastic rounding's step counter; by name. None for a build without a
        state table (an older tinytrain's)."""
        entries = self.info.get("state")
        if entries is None:
            return None
        return _split(entries, self._read_table("g", table_bytes(entries)))

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Write a state get_state() returned (checked: names, shapes, dtypes); the device
        refuses a pending-sample count outside 0..batch-1, changing nothing."""
        wrong = state_mismatch(self.info, state)
        if wrong:
            raise LinkError(wrong)
        self._write_table("s", b"".join(np.asarray(state[e["name"]]).tobytes()
                                        for e in self.info["state"]))

    def get_params(self) -> dict[str, np.ndarray]:
        raw = self.read_param_bytes()
        out, k = {}, 0
        for p in self.info["trainable"]:
            dt = np.dtype(NP_TYPES[p.get("dtype", "f32")])
            stored = p["packed"]["stored_shape"] if "packed" in p else p["shape"]
            n = int(np.prod(stored))
            out[p["name"]] = _whole(p, np.frombuffer(raw, dt, n, k).reshape(stored).copy())
            k += n * dt.itemsize
        return out

    def set_params(self, params: dict[str, np.ndarray]) -> None:
        parts = []
        for p in self.info["trainable"]:
            if p["name"] not in params:
                raise LinkError(f"state has no parameter '{p['name']}'")
            a = np.asarray(params[p["name"]], NP_TYPES[p.get("dtype", "f32")])
            if list(a.shape) != p["shape"]:
                raise LinkError(f"parameter '{p['name']}' has shape {list(a.shape)}, the "
                                f"program expects {p['shape']}")
            if "packed" in p:  # the device stores the trained channels only
                a = np.ascontiguousarray(a[..., p["packed"]["channels"]])
            parts.append(a.tobytes())
        self.write_param_bytes(b"".join(parts))

    def get_received(self) -> dict[str, np.ndarray]:
        """The received tensors' values the device runs now (built with --receive), by name:
        the compiled-in ones, or the last committed receive's."""
        entries = self.info.get("received") or []
        raw = self._read_table("Y", table_bytes(entries)) if entries else b""
        return _split(entries, raw)

    def receive(self, values: dict[str, np.ndarray]) -> int:
        """Send new values for the received tensors (program.json's "received", the build's
        own dtype: int8 codes at its scale for an int8 build), all of them, and commit: from
        the commit on the model runs them, and they are kept in flash with the parameters and
        the state as they are now (a checkpoint; its seq is returned). An error before the
        commit leaves the device running its old values."""
        entries = self.info.get("received") or []
        if not entries:
            raise LinkError("this build has no received tensors; build it with --receive PLAN")
        wrong = table_mismatch(entries, values, "received tensor")
        if wrong:
            raise LinkError(wrong)
        parts = [np.ascontiguousarray(values[e["name"]], NP_TYPES[e["dtype"]]).tobytes()
                 for e in entries]
        raw = b"".join(parts)
        starts = np.cumsum([0] + [len(b) for b in parts])
        slow = max(self.timeout, 30.0)  # the first piece erases a slot, the commit writes one
        off = 0
        while off < len(raw):
            end = min(off + max(RECEIVE_PIECE, self.chunk // RECEIVE_PIECE * RECEIVE_PIECE),
                      len(raw))
            k = int(np.searchsorted(starts, end, side="right")) - 1  # the tensor `end` is in
            if end < len(raw) and end != starts[k]:  # inside it: end on a piece boundary
                end = int(starts[k] + (end - starts[k]) // RECEIVE_PIECE * RECEIVE_PIECE)
            self.request("W", struct.pack("<I", off) + raw[off:end],
                         timeout=slow if off == 0 else None)
            off = end
            self._adapt_chunk()
        seq = struct.unpack("<I", self.request("X", timeout=slow))[0]
        written = getattr(self.transport, "flash_written", None)
        if written is not None:  # a QEMU twin: its flash reaches the disk now
            written()
        return seq

    def checkpoint(self) -> int:
        """Save the trained parameters to flash; returns the checkpoint's sequence number."""
        seq = struct.unpack("<I", self.request("C", timeout=max(self.timeout, 30.0)))[0]
        written = getattr(self.transport, "flash_written", None)
        if written is not None:  # a QEMU twin: its flash reaches the disk now, not at the end
            written()
        return seq

    def restore(self) -> int | None:
        """Load the newest valid checkpoint; None when there is none."""
        try:
            return struct.unpack("<I", self.request("L"))[0]
        except LinkError as e:
            if "no valid checkpoint" in str(e):
                return None
            raise

    def sgd(self, **values: float) -> dict[str, float]:
        """The SGD scalars in force on the device (lr, momentum, weight_decay); the ones given
        are set first, all or none (the device checks them: LinkError if it refuses one). A
        new value applies from the next update on; the build's values are the start."""
        unknown = set(values) - set(SGD_SCALARS)
        if unknown:
            raise LinkError(f"unknown SGD scalar(s) {sorted(unknown)}; settable: "
                            f"{', '.join(SGD_SCALARS)}")
        payload = b""
        if values:
            now = self.sgd()
            now.update(values)
            payload = struct.pack("<3f", *(now[k] for k in SGD_SCALARS))
        return dict(zip(SGD_SCALARS, struct.unpack("<3f", self.request("O", payload)),
                        strict=True))

    def device_stats(self) -> dict[str, int]:
        v = struct.unpack("<7I", self.request("K"))
        keys = ("steps", "skipped_nonfinite", "crc_errors", "bad_frames", "duplicates",
                "frames_ok", "boot_checkpoint")
        return dict(zip(keys, v, strict=True))

    def profile(self, reset: bool = False) -> list[int]:
        """Per-op tick counters accumulated since the last reset (TT_PROFILE builds)."""
        if reset:
            self.request("P", struct.pack("<H", 0xFFFF))
            return []
        out: list[int] = []
        while len(out) < self.device.profile_ops:
            data = self.request("P", struct.pack("<H", len(out)))
            (n,) = struct.unpack_from("<I", data)
            if n == 0:
                break
            out += struct.unpack_from(f"<{n}I", data, 4)
        return out

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def table_bytes(entries: list[dict[str, Any]]) -> int:
    """Bytes of a table program.json describes ({"shape", "dtype"} entries), back to back."""
    return sum(int(np.prod(e["shape"])) * np.dtype(NP_TYPES[e["dtype"]]).itemsize
               for e in entries)


def _split(entries: list[dict[str, Any]], raw: bytes) -> dict[str, np.ndarray]:
    """A table's bytes (entries back to back) as arrays by name."""
    out, k = {}, 0
    for e in entries:
        dt, n = np.dtype(NP_TYPES[e["dtype"]]), int(np.prod(e["shape"]))
        out[e["name"]] = np.frombuffer(raw, dt, n, k).reshape(e["shape"]).copy()
        k += n * dt.itemsize
    return out


def table_mismatch(entries: list[dict[str, Any]], values: dict[str, np.ndarray],
                   what: str) -> str | None:
    """Why `values` do not fill the table `entries` describes: a missing or unknown name, a
    shape, a non-finite float, or an integer table's value that is not one of its integers;
    None when they do."""
    extra = sorted(set(values) - {e["name"] for e in entries})
    if extra:
        return (f"{', '.join(extra)}: not a {what} of this build (it has "
                f"{', '.join(e['name'] for e in entries)})")
    for e in entries:
        if e["name"] not in values:
            return f"no values for {what} '{e['name']}'"
        a = np.asarray(values[e["name"]])
        if list(a.shape) != list(e["shape"]):
            return (f"{what} '{e['name']}' has shape {list(a.shape)}, the program's is "
                    f"{e['shape']}")
        dt = np.dtype(NP_TYPES[e["dtype"]])
        if dt.kind == "f":
            if a.dtype.kind not in "fiu" or not np.isfinite(a.astype(np.float64)).all():
                return f"{what} '{e['name']}' must hold finite numbers"
        elif a.dtype.kind not in "fiu" or not np.array_equal(
                np.clip(a, np.iinfo(dt).min, np.iinfo(dt).max).astype(dt), a):
            return (f"{what} '{e['name']}' holds values that are not {e['dtype']} integers "
                    "(an int8 build takes its own integer codes, at the scale program.json "
                    "gives)")
    return None


def state_mismatch(info: dict[str, Any], state: dict[str, np.ndarray]) -> str | None:
    """Why `state` is not the training state of the build `info` (program.json) describes:
    another set of entries, a shape or a dtype (a rebuild with another optimizer keeps the
    parameters' layout but not this one); None when it is."""
    entries = info.get("state")
    if not entries:
        return "this build has no training-state table (built by an older tinytrain)"
    extra = sorted(set(state) - {e["name"] for e in entries})
    if extra:
        return f"training state has {', '.join(extra)}, which this build does not keep"
    for e in entries:
        if e["name"] not in state:
            return f"training state has no '{e['name']}'"
        a = np.asarray(state[e["name"]])
        if list(a.shape) != list(e["shape"]) or a.dtype != NP_TYPES[e["dtype"]]:
            return (f"training state '{e['name']}' is {a.dtype} {list(a.shape)}, the "
                    f"program's is {e['dtype']} {e['shape']}")
    return None


def quantize_input(x: np.ndarray, quant: dict[str, Any]) -> np.ndarray:
    """Real values -> the int8 input's codes (TFLite AffineQuantize); NaN/Inf are refused."""
    a = np.asarray(x, np.float32).reshape(-1)
    bad = ~np.isfinite(a)
    if bad.any():
        k = int(np.argmax(bad))
        raise LinkError(f"sample value {k} is {a[k]}: an int8 model's input must be finite "
                        "real values (or int8 codes)")
    return quantize(a, quant["scale"], quant["zero_point"])
