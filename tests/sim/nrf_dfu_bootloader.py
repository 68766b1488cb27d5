"""The nRF5 SDK Secure DFU bootloader's serial transport (nrf_dfu_serial + nrf_dfu_req_handler),
as on the nRF52840 Dongle: an open bootloader that takes unsigned application updates.

Requests arrive SLIP-framed (END 0xC0, ESC 0xDB, 0xDB 0xDC = 0xC0, 0xDB 0xDD = 0xDB); a frame longer
than the MTU is dropped, as the transport's receive buffer would. Answers are 0x60, opcode,
result, payload. Object writes get no answer (unless a PRN is set). Flash is 1 MB of 4 KB pages:
MBR at 0, the application from 0x1000, this bootloader from 0xE0000. Creating a data object
erases its pages; writes are NOR programming (bits only go 1 -> 0), and the final Execute
hashes what is in flash, so a missing erase or a wrong hash fails the way it would on the chip.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable

from tests.sim import PtyDevice

OP_PROTOCOL_VERSION, OP_CREATE, OP_SET_PRN, OP_CRC, OP_EXECUTE = 0x00, 0x01, 0x02, 0x03, 0x04
OP_SELECT, OP_MTU, OP_WRITE, OP_PING, OP_HW_VERSION = 0x06, 0x07, 0x08, 0x09, 0x0A
OP_FW_VERSION, OP_ABORT, OP_RESPONSE = 0x0B, 0x0C, 0x60
OBJ_COMMAND, OBJ_DATA = 0x01, 0x02

RES_SUCCESS = 0x01
RES_OP_CODE_NOT_SUPPORTED = 0x02
RES_INVALID_PARAMETER = 0x03
RES_INSUFFICIENT_RESOURCES = 0x04
RES_INVALID_OBJECT = 0x05
RES_OPERATION_NOT_PERMITTED = 0x08
RES_OPERATION_FAILED = 0x0A
RES_EXT_ERROR = 0x0B
EXT_INIT_COMMAND_INVALID = 0x04
EXT_FW_VERSION_FAILURE = 0x05
EXT_HW_VERSION_FAILURE = 0x06
EXT_SD_VERSION_FAILURE = 0x07
EXT_WRONG_HASH_TYPE = 0x09
EXT_VERIFICATION_FAILED = 0x0C
EXT_INSUFFICIENT_SPACE = 0x0D

SLIP_END, SLIP_ESC, SLIP_ESC_END, SLIP_ESC_ESC = 0xC0, 0xDB, 0xDC, 0xDD
PROTOCOL_VERSION = 1
PAGE_SIZE = 4096
FLASH_SIZE = 1024 * 1024
RAM_SIZE = 256 * 1024
APP_START = 0x1000  # after the MBR; no SoftDevice
BOOTLOADER_START = 0xE0000
BOOTLOADER_VERSION = 1
INIT_COMMAND_MAX_SIZE = 512
DATA_OBJECT_MAX_SIZE = PAGE_SIZE
DEFAULT_MTU = 131  # the UART transport's encoded-frame limit in SDK 15
NRF52840_PART = 0x52840
VARIANT_AAD0 = 0x41414430
HW_VERSION = 52
SD_REQ_ANY, SD_REQ_NONE = 0xFFFE, 0x0000  # 0 is the FWID of "no SoftDevice present"
FW_TYPE_APPLICATION = 0
FIRMWARE_TYPE_APPLICATION, FIRMWARE_TYPE_BOOTLOADER, FIRMWARE_TYPE_UNKNOWN = 0x01, 0x02, 0xFF
HASH_TYPE_SHA256 = 3


class _InitError(Exception):
    def __init__(self, ext: int) -> None:
        self.ext = ext


def _decode_protobuf(data: bytes) -> dict[int, list[int | bytes]]:
    """Field number -> values, for varint (0) and length-delimited (2) fields only."""
    fields: dict[int, list[int | bytes]] = {}
    i = 0

    def varint() -> int:
        nonlocal i
        value = shift = 0
        while True:
            if i >= len(data):
                raise _InitError(EXT_INIT_COMMAND_INVALID)
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields.setdefault(number, []).append(varint())
        elif wire == 2:
            n = varint()
            if i + n > len(data):
                raise _InitError(EXT_INIT_COMMAND_INVALID)
            fields.setdefault(number, []).append(data[i:i + n])
            i += n
        else:
            raise _InitError(EXT_INIT_COMMAND_INVALID)
    return fields


def _packed_varints(data: bytes) -> list[int]:
    out, value, shift = [], 0, 0
    for b in data:
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            out.append(value)
            value = shift = 0
    return out


class NrfDfuBootloader(PtyDevice):
    """Fault switches: `corrupt_objects` (data object indices whose first write gets a flipped
    bit once, or on every attempt with `corrupt_always`, so the CRC check fails); `fail_on`
    (opcode, object type) answered with `fail_result` (and `fail_ext` for 0x0B) instead of being
    carried out; `app_version` of the installed application for the downgrade check; `part`."""

    def __init__(self, *, mtu: int = DEFAULT_MTU, part: int = NRF52840_PART,
                 app_version: int = 0, corrupt_objects: Iterable[int] = (),
                 corrupt_always: bool = False, fail_on: tuple[int, int] | None = None,
                 fail_result: int = RES_OPERATION_FAILED, fail_ext: int = 0) -> None:
        super().__init__()
        self.mtu, self.part, self.app_version = mtu, part, app_version
        self.corrupt_objects, self.corrupt_always = set(corrupt_objects), corrupt_always
        self.fail_on, self.fail_result, self.fail_ext = fail_on, fail_result, fail_ext
        self.flash = bytearray(b"\xff" * FLASH_SIZE)
        self.requests: list[int] = []  # opcodes in arrival order
        self.dropped_frames = 0
        self.corruptions = 0
        self.created_data_offsets: list[int] = []  # image offset of every data Create
        self.activated = False
        self.prn = 0
        self._prn_count = 0
        self._object = OBJ_COMMAND  # nrf_dfu_obj_op's "current object"
        self._reset_progress()

    def _reset_progress(self) -> None:
        self.init_valid = False
        self.command = bytearray()
        self.command_size = 0
        self.firmware_size = 0
        self.image_hash = b""
        self.fw_version = 0
        self.data_object_size = 0
        self.offset = self.crc = 0  # firmware_image_offset / _crc
        self.offset_last = self.crc_last = 0  # ... as of the last executed object
        self._corrupted: set[int] = set()

    def load(self, address: int, data: bytes) -> None:
        self.flash[address:address + len(data)] = data

    # ---- transport: SLIP frames ----

    def serve(self) -> None:
        frame, encoded_len, escaped = bytearray(), 0, False
        while True:
            c = self.read_byte()
            encoded_len += 1
            if self.activated:
                continue  # reset into the application: DFU is gone
            if c == SLIP_END:
                if frame and encoded_len <= self.mtu and not escaped:
                    self._request(bytes(frame))
                elif frame:
                    self.dropped_frames += 1
                frame, encoded_len, escaped = bytearray(), 0, False
            elif escaped:
                escaped = False
                if c == SLIP_ESC_END:
                    frame.append(SLIP_END)
                elif c == SLIP_ESC_ESC:
                    frame.append(SLIP_ESC)
                else:
                    frame, encoded_len = bytearray(), self.mtu + 1  # bad escape: drop the frame
            elif c == SLIP_ESC:
                escaped = True
            else:
                frame.append(c)

    def _respond(self, opcode: int, result: int, payload: bytes = b"") -> None:
        out = bytearray()
        for b in bytes([OP_RESPONSE, opcode, result]) + payload:
            if b == SLIP_END:
                out += bytes([SLIP_ESC, SLIP_ESC_END])
            elif b == SLIP_ESC:
                out += bytes([SLIP_ESC, SLIP_ESC_ESC])
            else:
                out.append(b)
        out.append(SLIP_END)
        self.write(bytes(out))

    # ---- request handler ----

    def _request(self, frame: bytes) -> None:
        opcode, params = frame[0], frame[1:]
        self.requests.append(opcode)
        if opcode in (OP_SELECT, OP_CREATE) and params:
            self._object = params[0]
        if self.fail_on == (opcode, self._object) and opcode != OP_WRITE:
            self._respond(opcode, self.fail_result,
                          bytes([self.fail_ext]) if self.fail_result == RES_EXT_ERROR else b"")
            return
        if opcode == OP_WRITE:
            self._write(params)
            return
        handler = {OP_PROTOCOL_VERSION: self._protocol_version, OP_SET_PRN: self._set_prn,
                   OP_PING: self._ping, OP_MTU: self._mtu_get, OP_HW_VERSION: self._hw_version,
                   OP_FW_VERSION: self._fw_version, OP_ABORT: self._abort,
                   OP_SELECT: self._select, OP_CREATE: self._create, OP_CRC: self._crc,
                   OP_EXECUTE: self._execute}.get(opcode)
        if handler is None:
            self._respond(opcode, RES_OP_CODE_NOT_SUPPORTED)
            return
        try:
            result, payload = handler(params)
        except struct.error:  # parameters too short
            result, payload = RES_INVALID_PARAMETER, b""
        except _InitError as e:
            result, payload = RES_EXT_ERROR, bytes([e.ext])
        if opcode == OP_EXECUTE and result == RES_SUCCESS and self.init_valid \
                and self._object == OBJ_DATA and self.offset == self.firmware_size:
            # After this answer the chip writes its settings and resets into the new app. Set
            # before answering, so a test that has the answer also sees the state.
            self.activated = True
        self._respond(opcode, result, payload)

    def _protocol_version(self, _p: bytes) -> tuple[int, bytes]:
        return RES_SUCCESS, bytes([PROTOCOL_VERSION])

    def _set_prn(self, p: bytes) -> tuple[int, bytes]:
        (self.prn,) = struct.unpack("<H", p[:2])
        self._prn_count = 0
        return RES_SUCCESS, b""

    def _ping(self, p: bytes) -> tuple[int, bytes]:
        return RES_SUCCESS, p[:1]

    def _mtu_get(self, _p: bytes) -> tuple[int, bytes]:
        return RES_SUCCESS, struct.pack("<H", self.mtu)

    def _hw_version(self, _p: bytes) -> tuple[int, bytes]:
        return RES_SUCCESS, struct.pack("<5I", self.part, VARIANT_AAD0, FLASH_SIZE, RAM_SIZE,
                                        PAGE_SIZE)

    def _fw_version(self, p: bytes) -> tuple[int, bytes]:
        image = struct.unpack("<B", p[:1])[0]
        if image == 0:
            info = (FIRMWARE_TYPE_BOOTLOADER, BOOTLOADER_VERSION, BOOTLOADER_START,
                    FLASH_SIZE - BOOTLOADER_START)
        elif image == 1 and self.activated:
            info = (FIRMWARE_TYPE_APPLICATION, self.app_version, APP_START, self.firmware_size)
        else:
            info = (FIRMWARE_TYPE_UNKNOWN, 0, 0, 0)
        return RES_SUCCESS, struct.pack("<BIII", *info)

    def _abort(self, _p: bytes) -> tuple[int, bytes]:
        self._reset_progress()
        return RES_SUCCESS, b""

    def _select(self, p: bytes) -> tuple[int, bytes]:
        if self._object == OBJ_COMMAND:
            return RES_SUCCESS, struct.pack("<III", INIT_COMMAND_MAX_SIZE, len(self.command),
                                            zlib.crc32(self.command))
        if self._object == OBJ_DATA:
            return RES_SUCCESS, struct.pack("<III", DATA_OBJECT_MAX_SIZE, self.offset, self.crc)
        return RES_INVALID_OBJECT, b""

    def _create(self, p: bytes) -> tuple[int, bytes]:
        _type, size = struct.unpack("<BI", p[:5])
        if self._object == OBJ_COMMAND:
            if size == 0:
                return RES_INVALID_PARAMETER, b""
            if size > INIT_COMMAND_MAX_SIZE:
                return RES_INSUFFICIENT_RESOURCES, b""
            self._reset_progress()  # a new init command starts the whole DFU over
            self.command_size = size
            return RES_SUCCESS, b""
        if self._object != OBJ_DATA:
            return RES_INVALID_OBJECT, b""
        if not self.init_valid:
            return RES_OPERATION_NOT_PERMITTED, b""
        if size == 0 or (size % PAGE_SIZE and self.offset_last + size != self.firmware_size):
            return RES_INVALID_PARAMETER, b""
        if size > DATA_OBJECT_MAX_SIZE:
            return RES_INSUFFICIENT_RESOURCES, b""
        if self.offset_last + size > self.firmware_size:
            return RES_OPERATION_NOT_PERMITTED, b""
        # Drop anything written after the last executed object, then erase this object's pages.
        self.data_object_size = size
        self.offset, self.crc = self.offset_last, self.crc_last
        self.created_data_offsets.append(self.offset)
        start = APP_START + self.offset
        pages = -(-size // PAGE_SIZE)
        self.flash[start:start + pages * PAGE_SIZE] = b"\xff" * (pages * PAGE_SIZE)
        return RES_SUCCESS, b""

    def _write(self, data: bytes) -> None:
        if not data:
            return
        if self._object == OBJ_COMMAND:
            if len(self.command) + len(data) > self.command_size:
                return  # INVALID_PARAMETER, which the serial transport does not send for writes
            self.command += data
        elif self._object == OBJ_DATA:
            if not self.init_valid or self.offset - self.offset_last + len(data) \
                    > self.data_object_size:
                return
            index = self.offset_last // DATA_OBJECT_MAX_SIZE
            if index in self.corrupt_objects and (self.corrupt_always
                                                  or index not in self._corrupted):
                self._corrupted.add(index)
                self.corruptions += 1
                data = bytes([data[0] ^ 0x01]) + data[1:]  # a bit flipped on the wire
            addr = APP_START + self.offset
            for i, b in enumerate(data):  # NOR flash: programming only clears bits
                self.flash[addr + i] &= b
            self.offset += len(data)
            self.crc = zlib.crc32(data, self.crc)
        if self.prn:
            self._prn_count += 1
            if self._prn_count == self.prn:
                self._prn_count = 0
                self._respond(OP_CRC, RES_SUCCESS, self._crc(b"")[1])

    def _crc(self, _p: bytes) -> tuple[int, bytes]:
        if self._object == OBJ_COMMAND:
            return RES_SUCCESS, struct.pack("<II", len(self.command), zlib.crc32(self.command))
        return RES_SUCCESS, struct.pack("<II", self.offset, self.crc)

    def _execute(self, _p: bytes) -> tuple[int, bytes]:
        if self._object == OBJ_COMMAND:
            if not self.command_size or len(self.command) != self.command_size:
                return RES_OPERATION_NOT_PERMITTED, b""
            self._validate_init(bytes(self.command))
            self.init_valid = True
            return RES_SUCCESS, b""
        if self.data_object_size != self.offset - self.offset_last:
            return RES_OPERATION_NOT_PERMITTED, b""
        self.data_object_size = 0
        self.offset_last, self.crc_last = self.offset, self.crc
        if self.offset == self.firmware_size:  # post-validation of the whole image
            image = bytes(self.flash[APP_START:APP_START + self.firmware_size])
            if hashlib.sha256(image).digest()[::-1] != self.image_hash:
                raise _InitError(EXT_VERIFICATION_FAILED)
            self.app_version = self.fw_version
        return RES_SUCCESS, b""

    def _validate_init(self, packet: bytes) -> None:
        """Decode dfu-cc.proto Packet -> Command -> InitCommand and pre-validate it."""
        command = _decode_protobuf(packet).get(1)  # field 2 would be a signed command
        if not command or not isinstance(command[0], bytes):
            raise _InitError(EXT_INIT_COMMAND_INVALID)
        cmd = _decode_protobuf(command[0])
        if cmd.get(1) != [1] or not cmd.get(2) or not isinstance(cmd[2][0], bytes):
            raise _InitError(EXT_INIT_COMMAND_INVALID)  # op_code must be INIT
        init = _decode_protobuf(cmd[2][0])
        fw_version = init.get(1, [0])[0]
        if init.get(4, [FW_TYPE_APPLICATION])[0] != FW_TYPE_APPLICATION:
            raise _InitError(EXT_INIT_COMMAND_INVALID)  # this simulator takes applications only
        if init.get(2, [None])[0] != HW_VERSION:
            raise _InitError(EXT_HW_VERSION_FAILURE)
        sd_req: list[int] = []
        for v in init.get(3, []):  # packed, or one varint per entry
            sd_req += _packed_varints(v) if isinstance(v, bytes) else [v]
        if not {SD_REQ_ANY, SD_REQ_NONE} & set(sd_req):
            raise _InitError(EXT_SD_VERSION_FAILURE)
        if not isinstance(fw_version, int) or fw_version < self.app_version:
            raise _InitError(EXT_FW_VERSION_FAILURE)
        app_size = init.get(7, [0])[0]
        if not isinstance(app_size, int) or app_size == 0:
            raise _InitError(EXT_INIT_COMMAND_INVALID)
        if APP_START + app_size > BOOTLOADER_START:
            raise _InitError(EXT_INSUFFICIENT_SPACE)
        hash_msg = init.get(8, [b""])[0]
        hash_fields = _decode_protobuf(hash_msg) if isinstance(hash_msg, bytes) else {}
        digest = hash_fields.get(2, [b""])[0]
        if hash_fields.get(1) != [HASH_TYPE_SHA256] or not isinstance(digest, bytes) \
                or len(digest) != 32:
            raise _InitError(EXT_WRONG_HASH_TYPE)
        self.firmware_size, self.image_hash, self.fw_version = app_size, digest, fw_version
