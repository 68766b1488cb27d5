"""Framing of the serial link: HDLC-style byte stuffing around a versioned body with a CRC-32.

Body: u8 version | u16 seq | u8 cmd | payload | u32 zlib.crc32(all before it), little-endian.
Wire: 0x7E stuffed(body) 0x7E, with 0x7E -> 0x7D 0x5E and 0x7D -> 0x7D 0x5D.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

VERSION = 6  # firmware/tt_link.h TT_LINK_VERSION
OLDEST = 4  # the oldest firmware the host still talks to, with that version's commands
# the commands added since OLDEST: the link version that first has each, and what it does
SINCE = {"O": (5, "SGD scalars"), "g": (5, "read the training state"),
         "s": (5, "write the training state"), "W": (6, "write received tensors"),
         "X": (6, "commit received tensors"), "Y": (6, "read received tensors")}
FLAG, ESC = 0x7E, 0x7D
NAK = 0x15
HEADER = struct.Struct("<BHB")
MIN_BODY = HEADER.size + 4
# A frame longer than this is garbage (the largest real one is a sample of a big model).
MAX_FRAME = 1 << 22


def stuff(body: bytes) -> bytes:
    return body.replace(b"\x7d", b"\x7d\x5d").replace(b"\x7e", b"\x7d\x5e")


def unstuff(data: bytes) -> bytes | None:
    """Undo stuff(); None if an escape is not followed by one of the two escaped values."""
    if b"\x7d" in data:
        for k in range(len(data)):  # rare path: validate every escape
            if data[k] == ESC and (k + 1 >= len(data) or data[k + 1] not in (0x5D, 0x5E)):
                return None
    return data.replace(b"\x7d\x5e", b"\x7e").replace(b"\x7d\x5d", b"\x7d")


def encode(seq: int, cmd: int, payload: bytes = b"", version: int = VERSION) -> bytes:
    body = HEADER.pack(version, seq & 0xFFFF, cmd) + payload
    return b"\x7e" + stuff(body + struct.pack("<I", zlib.crc32(body))) + b"\x7e"


@dataclass(frozen=True)
class Frame:
    version: int
    seq: int
    cmd: int
    payload: bytes


class FrameReader:
    """Incremental decoder: feed() bytes as they arrive, get whole frames back. Counts what it
    throws away so the link can report it."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._in_frame = False
        self.crc_errors = 0
        self.bad_frames = 0

    def feed(self, data: bytes) -> list[Frame]:
        out: list[Frame] = []
        for part in _split_keep(data):
            if part == b"\x7e":
                if self._in_frame and self._buf:
                    f = self._decode(bytes(self._buf))
                    if f is not None:
                        out.append(f)
                self._buf.clear()
                self._in_frame = True  # a flag both ends a frame and may start the next
            elif self._in_frame:
                self._buf += part
                if len(self._buf) > MAX_FRAME:
                    self.bad_frames += 1
                    self._buf.clear()
                    self._in_frame = False
        return out

    def _decode(self, raw: bytes) -> Frame | None:
        body = unstuff(raw)
        if body is None or len(body) < MIN_BODY:
            self.bad_frames += 1
            return None
        (crc,) = struct.unpack_from("<I", body, len(body) - 4)
        if zlib.crc32(body[:-4]) != crc:
            self.crc_errors += 1
            return None
        version, seq, cmd = HEADER.unpack_from(body)
        return Frame(version, seq, cmd, body[HEADER.size:-4])


def _split_keep(data: bytes) -> list[bytes]:
    parts: list[bytes] = []
    start = 0
    while True:
        k = data.find(b"\x7e", start)
        if k < 0:
            if start < len(data):
                parts.append(data[start:])
            return parts
        if k > start:
            parts.append(data[start:k])
        parts.append(b"\x7e")
        start = k + 1
