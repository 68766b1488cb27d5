"""nRF52840 flashing through the nRF5 SDK Secure DFU bootloader over serial (`nrfutil dfu serial`).

This is the bootloader the nRF52840 Dongle (PCA10059) ships with, reached over its USB CDC port;
the same protocol runs over a UART. Each request is an opcode plus little-endian parameters,
SLIP-framed; each answer is 0x60, the opcode, a result code and the payload. The image travels
as a command object (the init packet: what the image is and its SHA-256) followed by data objects
of at most max_size bytes, each created, written, CRC-checked and executed in turn.
"""

from __future__ import annotations

import hashlib
import struct
import time
import zlib
from collections.abc import Sequence

import serial

from tinytrain.device.flashing.common import FlashError, Progress, Segment, open_serial
from tinytrain.device.flashing.elf import merge_segments

OP_PROTOCOL_VERSION = 0x00
OP_CREATE = 0x01
OP_SET_PRN = 0x02
OP_CRC = 0x03
OP_EXECUTE = 0x04
OP_SELECT = 0x06
OP_MTU = 0x07
OP_WRITE = 0x08
OP_PING = 0x09
OP_HW_VERSION = 0x0A
OP_FW_VERSION = 0x0B
OP_ABORT = 0x0C
OP_RESPONSE = 0x60
OBJ_COMMAND = 0x01
OBJ_DATA = 0x02

RES_SUCCESS = 0x01
RES_EXT_ERROR = 0x0B
# nrf_dfu_req_handler.h (nRF5 SDK 15+): the result byte of every response.
RESULT_NAMES = {0x00: "invalid result", 0x02: "opcode not supported", 0x03: "invalid parameter",
                0x04: "insufficient resources", 0x05: "invalid object",
                0x07: "unsupported object type", 0x08: "operation not permitted",
                0x0A: "operation failed"}
# nrf_dfu_handling_error.h: the byte after RES_EXT_ERROR.
EXT_ERROR_NAMES = {0x00: "no error", 0x01: "invalid error code", 0x02: "wrong command format",
                   0x03: "unknown command", 0x04: "init command invalid",
                   0x05: "firmware version too old", 0x06: "hardware version mismatch",
                   0x07: "SoftDevice requirement not met", 0x08: "signature missing",
                   0x09: "wrong hash type", 0x0A: "hash failed", 0x0B: "wrong signature type",
                   0x0C: "image verification failed", 0x0D: "insufficient space"}
OPCODE_NAMES = {OP_CREATE: "Create", OP_SET_PRN: "Set PRN", OP_CRC: "Calculate CRC",
                OP_EXECUTE: "Execute", OP_SELECT: "Select", OP_MTU: "Get MTU", OP_PING: "Ping",
                OP_HW_VERSION: "Get hardware version"}

SLIP_END, SLIP_ESC, SLIP_ESC_END, SLIP_ESC_ESC = 0xC0, 0xDB, 0xDC, 0xDD

# Init packet (dfu-cc.proto) values for an unsigned application update.
NRF52_HW_VERSION = 52
SD_REQ_ANY = 0xFFFE  # "any or no SoftDevice": the image does not depend on one
FW_TYPE_APPLICATION = 0
HASH_TYPE_SHA256 = 3
OP_CODE_INIT = 1
DEFAULT_FW_VERSION = 1  # must not be below the version already on the device (downgrade check)

NRF52840_PART = 0x52840
APP_BASE = 0x1000  # with no SoftDevice the bootloader puts the application right after the MBR
PING_ATTEMPTS = 3
OBJECT_ATTEMPTS = 3  # per data object: a CRC mismatch is resent this often, as nrfutil resumes
EXECUTE_TIMEOUT_S = 10.0  # the last Execute checks the hash and may copy banks before answering
CREATE_TIMEOUT_S = 2.0  # Create erases the object's flash pages (85 ms per 4 KB page, max)


def flash(port: str, segments: Sequence[Segment], *, baud: int = 115200, timeout: float = 1.0,
          progress: Progress | None = None, fw_version: int = DEFAULT_FW_VERSION) -> None:
    """ping, set PRN 0, get MTU, send the init packet, then the image object by object."""
    image = application_image(segments)
    init = init_packet(image, fw_version=fw_version)
    with open_serial(port, baud=baud, timeout=timeout) as ser:
        dfu = _Dfu(ser, port, timeout)
        dfu.ping()
        dfu.check_hardware()
        dfu.request(OP_SET_PRN, struct.pack("<H", 0))  # no receipts: we ask for the CRC per object
        (mtu,) = struct.unpack("<H", dfu.request(OP_MTU, b"", 2))
        dfu.chunk = (mtu - 1) // 2 - 1  # SLIP may double every byte; one byte is the opcode
        if dfu.chunk < 1:
            raise FlashError(f"the DFU bootloader on {port} reports an unusable MTU of {mtu}")
        dfu.send_init(init)
        dfu.send_image(image, progress)


def application_image(segments: Sequence[Segment]) -> bytes:
    """One contiguous binary from APP_BASE, gaps filled with erased-flash 0xFF (as nrfutil's
    hex-to-bin does): DFU carries a single image and the bootloader decides where it goes."""
    merged = merge_segments(list(segments))
    base = merged[0][0]
    if base != APP_BASE:
        raise FlashError(f"the image starts at 0x{base:08X}, but the nRF DFU bootloader (no "
                         f"SoftDevice) places applications at 0x{APP_BASE:08X}; link the firmware "
                         "there")
    end = merged[-1][0] + len(merged[-1][1])
    image = bytearray(b"\xff" * (end - base))
    for addr, data in merged:
        image[addr - base:addr - base + len(data)] = data
    return bytes(image)


def init_packet(image: bytes, *, fw_version: int = DEFAULT_FW_VERSION) -> bytes:
    """An unsigned dfu-cc.proto Packet{command: Command{op_code: INIT, init: InitCommand}}."""
    # The bootloader compares the SHA-256 little-endian, so the digest goes in reversed.
    digest = hashlib.sha256(image).digest()[::-1]
    hash_msg = _varint_field(1, HASH_TYPE_SHA256) + _bytes_field(2, digest)
    init_cmd = (_varint_field(1, fw_version) + _varint_field(2, NRF52_HW_VERSION)
                + _bytes_field(3, _varint(SD_REQ_ANY))  # repeated uint32 sd_req, packed
                + _varint_field(4, FW_TYPE_APPLICATION) + _varint_field(7, len(image))
                + _bytes_field(8, hash_msg))
    command = _varint_field(1, OP_CODE_INIT) + _bytes_field(2, init_cmd)
    return _bytes_field(1, command)


def slip_encode(payload: bytes) -> bytes:
    out = bytearray()
    for b in payload:
        if b == SLIP_END:
            out += bytes([SLIP_ESC, SLIP_ESC_END])
        elif b == SLIP_ESC:
            out += bytes([SLIP_ESC, SLIP_ESC_ESC])
        else:
            out.append(b)
    out.append(SLIP_END)
    return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)  # wire type 0


def _bytes_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value  # wire type 2


class _Transient(Exception):
    """A CRC or offset that disagrees with what we sent: resend the object."""


class _Dfu:
    def __init__(self, ser: serial.SerialBase, port: str, timeout: float) -> None:
        self.ser, self.port, self.timeout = ser, port, timeout
        self.chunk = 0

    def ping(self) -> None:
        for ping_id in range(1, PING_ATTEMPTS + 1):
            self.ser.reset_input_buffer()
            self._send(bytes([OP_PING, ping_id]))
            reply = self._receive()
            if reply and reply[:2] == bytes([OP_RESPONSE, OP_PING]):
                return  # even an error result proves a DFU bootloader is listening
        raise FlashError(f"no answer from an nRF DFU bootloader on {self.port}; put the board "
                         "in bootloader mode (Dongle: press the side RESET button, the LED "
                         "pulses red)")

    def check_hardware(self) -> None:
        """Refuse a chip other than the nRF52840, when the bootloader says which it is."""
        self._send(bytes([OP_HW_VERSION]))
        reply = self._receive()
        if not reply or reply[:2] != bytes([OP_RESPONSE, OP_HW_VERSION]) or len(reply) < 7 \
                or reply[2] != RES_SUCCESS:
            return  # SDK < 15.1 bootloaders do not implement it; the init packet still checks
        (part,) = struct.unpack_from("<I", reply, 3)
        if part != NRF52840_PART:
            raise FlashError(f"the DFU bootloader on {self.port} runs on an nRF{part:X}, not an "
                             "nRF52840; wrong board or port?")

    def request(self, opcode: int, params: bytes, reply_len: int = 0, *, what: str = "",
                timeout: float | None = None) -> bytes:
        """Send one request and return its payload; any result but success is a FlashError."""
        self._send(bytes([opcode]) + params)
        reply = self._receive(timeout)
        what = what or OPCODE_NAMES.get(opcode, f"opcode 0x{opcode:02X}")
        if reply is None:
            raise FlashError(f"nRF DFU bootloader on {self.port}: no answer to {what} within "
                             f"{timeout or self.timeout:g} s")
        if len(reply) < 3 or reply[0] != OP_RESPONSE or reply[1] != opcode:
            raise FlashError(f"nRF DFU bootloader on {self.port}: garbled answer to {what} "
                             f"({reply[:8].hex(' ')})")
        result = reply[2]
        if result == RES_EXT_ERROR:
            ext = reply[3] if len(reply) > 3 else 0x01
            raise FlashError(f"nRF DFU bootloader on {self.port} rejected {what}: extended error "
                             f"0x{ext:02X} ({EXT_ERROR_NAMES.get(ext, 'unknown')})")
        if result != RES_SUCCESS:
            raise FlashError(f"nRF DFU bootloader on {self.port} rejected {what}: result "
                             f"0x{result:02X} ({RESULT_NAMES.get(result, 'unknown')})")
        if len(reply) - 3 < reply_len:
            raise FlashError(f"nRF DFU bootloader on {self.port}: short answer to {what}")
        return reply[3:3 + reply_len]

    def select(self, obj_type: int) -> tuple[int, int, int]:
        """(max_size, offset, crc) of the object type the device holds."""
        name = "command" if obj_type == OBJ_COMMAND else "data"
        return struct.unpack("<III", self.request(OP_SELECT, bytes([obj_type]), 12,
                                                  what=f"Select ({name} object)"))

    def send_init(self, init: bytes) -> None:
        max_size, offset, crc = self.select(OBJ_COMMAND)
        if len(init) > max_size:
            raise FlashError(f"the init packet ({len(init)} bytes) exceeds the bootloader's "
                             f"command object size ({max_size})")
        what = "Execute (init packet)"
        if offset == len(init) and crc == zlib.crc32(init):
            # An interrupted earlier run sent this very init packet (same image hash): executing
            # it again keeps the device's data progress, so send_image can resume (as nrfutil).
            self.request(OP_EXECUTE, b"", what=what)
            return
        # Creating a command object resets all DFU progress on the device.
        self.request(OP_CREATE, struct.pack("<BI", OBJ_COMMAND, len(init)),
                     what="Create (command object)")
        try:
            self._stream(init, 0, 0)
        except _Transient as e:
            raise FlashError(f"nRF DFU bootloader on {self.port}: the init packet arrived "
                             f"damaged ({e})") from None
        self.request(OP_EXECUTE, b"", what=what)

    def send_image(self, image: bytes, progress: Progress | None) -> None:
        max_size, offset, crc = self.select(OBJ_DATA)
        done = self._recover(image, max_size, offset, crc)
        while done < len(image):
            data = image[done:done + max_size]
            where = f"data object at image offset {done} (0x{APP_BASE + done:08X})"
            for attempt in range(1, OBJECT_ATTEMPTS + 1):
                # Create drops whatever the device holds past its last executed object, so a
                # damaged object is simply sent again.
                self.request(OP_CREATE, struct.pack("<BI", OBJ_DATA, len(data)),
                             what=f"Create ({where})", timeout=max(self.timeout, CREATE_TIMEOUT_S))
                try:
                    self._stream(data, done, zlib.crc32(image[:done]))
                    break
                except _Transient as e:
                    if attempt == OBJECT_ATTEMPTS:
                        raise FlashError(f"nRF DFU bootloader on {self.port}: {where} failed its "
                                         f"CRC check {OBJECT_ATTEMPTS} times ({e})") from None
            last = done + len(data) == len(image)
            self.request(OP_EXECUTE, b"", what=f"Execute ({where})",
                         timeout=max(self.timeout, EXECUTE_TIMEOUT_S) if last else None)
            done += len(data)
            if progress:
                progress(done, len(image))

    def _recover(self, image: bytes, max_size: int, offset: int, crc: int) -> int:
        """Where to continue after data an earlier run left on the device (nrfutil's rules)."""
        if offset == 0:
            return 0
        remainder = offset % max_size
        if offset > len(image) or zlib.crc32(image[:offset]) != crc:
            return offset - (remainder or max_size)  # damaged: redo the last object
        if remainder and offset != len(image):
            rest = image[offset:offset + max_size - remainder]
            try:
                self._stream(rest, offset, crc)
            except _Transient:
                return offset - remainder
            offset += len(rest)
        self.request(OP_EXECUTE, b"", what="Execute (resumed data object)",
                     timeout=max(self.timeout, EXECUTE_TIMEOUT_S))
        return offset

    def _stream(self, data: bytes, offset: int, crc: int) -> None:
        """Write `data` in MTU-sized chunks, then check the device's offset and running CRC."""
        for i in range(0, len(data), self.chunk):
            self._send(bytes([OP_WRITE]) + data[i:i + self.chunk])  # no reply with PRN 0
        want_offset, want_crc = offset + len(data), zlib.crc32(data, crc)
        got_offset, got_crc = struct.unpack("<II", self.request(OP_CRC, b"", 8))
        if (got_offset, got_crc) != (want_offset, want_crc):
            raise _Transient(f"device has offset {got_offset} CRC 0x{got_crc:08X}, expected "
                             f"{want_offset} CRC 0x{want_crc:08X}")

    def _send(self, payload: bytes) -> None:
        self.ser.write(slip_encode(payload))

    def _receive(self, timeout: float | None = None) -> bytes | None:
        """One SLIP frame, or None when none completes within the timeout."""
        deadline = time.monotonic() + (timeout or self.timeout)
        try:
            frame, escaped = bytearray(), False
            while True:
                self.ser.timeout = max(0.0, deadline - time.monotonic())
                b = self.ser.read(1)
                if not b:
                    return None
                c = b[0]
                if escaped:
                    if c not in (SLIP_ESC_END, SLIP_ESC_ESC):
                        raise FlashError(f"nRF DFU bootloader on {self.port}: bad SLIP escape "
                                         f"0xDB 0x{c:02X}; is this port a DFU bootloader?")
                    frame.append(SLIP_END if c == SLIP_ESC_END else SLIP_ESC)
                    escaped = False
                elif c == SLIP_ESC:
                    escaped = True
                elif c == SLIP_END:
                    if frame:  # an END before any byte just separates frames
                        return bytes(frame)
                else:
                    frame.append(c)
        finally:
            self.ser.timeout = self.timeout

