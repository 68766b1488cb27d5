"""The link's versions and its answers to frames it cannot serve, on host builds:

- firmware of earlier link versions (4: no 'O', 'g', 's'; 5: no 'W', 'X', 'Y') is spoken to
  in its own version, and a command it lacks is refused by name with the version it needs;
- with a large int8 model (micro_speech: 1960-byte samples, far over the device's receive
  buffer) every frame with a bad CRC is NAKed whatever its length, a valid request of
  another version gets status 6, and an over-long request of this version status 2;
- commands without a payload refuse one, and an mse model refuses a NaN target (status 3),
  as docs/serial-protocol.md says; nothing of that changes a parameter."""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from tinytrain.device.build import build
from tinytrain.device.link.device import TICKS_NS, TICKS_UNKNOWN
from tinytrain.device.link.frames import NAK, VERSION, Frame, FrameReader, encode
from tinytrain.device.link.transport import LinkError
from tinytrain.device.runner import open_program
from tinytrain.device.toolchain import run_make
from tinytrain.passes.pipeline import Options

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
SPEECH = ROOT / "tests" / "fixtures" / "micro_speech_quantized.tflite"
REPLY_WAIT = 10.0  # s for a host build's reply (it answers in milliseconds)
RX_PAYLOAD = 260  # bytes: firmware/tt_link.c TT_RX_PAYLOAD for these models (4 + chunk)
OK, BAD_LENGTH, BAD_ARG, BAD_VERSION = 0, 2, 3, 6


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("versions")
    out = {"digits": d / "digits", "speech": d / "speech", "mse": d / "mse"}
    build(DIGITS, out["digits"], Options())
    build(SPEECH, out["speech"], Options(update="bias"))
    build(DIGITS, out["mse"], Options(loss="mse"))
    for v in (4, 5):  # the same program as the firmware of that version served it
        old = d / f"digits_v{v}"
        shutil.copytree(out["digits"], old)
        shutil.rmtree(old / "obj")  # rebuilt with the old version's flag
        assert run_make(old, [f"CFLAGS=$(CFLAGS_COMMON) -DTT_LINK_VERSION={v}"]).returncode == 0
        out[f"v{v}"] = old
    return out


def _reply(dev, frame: bytes) -> Frame:
    """Send a raw frame; the first frame the device answers with."""
    dev.transport.write(frame)
    reader, deadline = FrameReader(), time.monotonic() + REPLY_WAIT
    while time.monotonic() < deadline:
        got = reader.feed(dev.transport.read(deadline - time.monotonic()))
        if got:
            return got[0]
    raise AssertionError("no answer")


def _bad_crc(frame: bytes, at: int) -> bytes:
    f = bytearray(frame)
    f[at] ^= 0x01 if f[at] ^ 0x01 not in (0x7E, 0x7D) else 0x03
    return bytes(f)


def test_previous_version_firmware_names_what_it_lacks(builds) -> None:
    x = np.zeros((8, 8, 1), np.float32)
    with open_program(builds["v4"]) as dev:
        assert dev.version == 4
        assert dev.device.tick_unit == TICKS_UNKNOWN  # its hello ends at the board name
        dev.train(x, np.array([3]))
        params = dev.get_params()
        assert params and dev.device_stats()["steps"] == 1
        with pytest.raises(LinkError, match=r"link version 4, which has no 'O' command "
                           r"\(SGD scalars\): that needs link version 5"):
            dev.sgd(lr=0.1)
        with pytest.raises(LinkError, match=r"no 'g' command .* needs link version 5"):
            dev.get_state()
    with open_program(builds["v5"]) as dev:
        assert dev.version == 5 and dev.device.tick_unit == TICKS_NS
        assert dev.sgd()["lr"] > 0 and dev.get_state() is not None
        with pytest.raises(LinkError, match=r"link version 5, which has no 'X' command "
                           r"\(commit received tensors\): that needs link version 6"):
            dev.request("X")
    with open_program(builds["digits"]) as dev:  # the same program at this version
        assert dev.device.tick_unit == TICKS_NS  # a host build's clock, said in the hello
        assert dev.version == VERSION == 6
        assert dev.device.received_bytes == 0 and dev.get_received() == {}
        assert dev.sgd()["lr"] > 0 and dev.get_state() is not None


def test_frames_a_large_int8_model_cannot_serve(builds) -> None:
    with open_program(builds["speech"]) as dev:
        before = dev.get_params()
        sample = dev.encode_input(np.zeros(1960, np.int8))
        assert len(sample) > RX_PAYLOAD
        train = encode(40000, ord("T"), struct.pack("<i", 1) + sample)
        for at in (2, 3, 4, len(train) // 2, len(train) - 3):  # version, seq, cmd, data, CRC
            assert _reply(dev, _bad_crc(train, at)).cmd == NAK, at
        other = _reply(dev, encode(40001, ord("T"), struct.pack("<i", 1) + sample, VERSION - 1))
        assert other.cmd == ord("T") | 0x80 and other.payload == bytes([BAD_VERSION, VERSION])
        long_get = _reply(dev, encode(40002, ord("G"), bytes(2000)))
        assert long_get.payload == bytes([BAD_LENGTH])
        for cmd in "HKUCLR":
            r = _reply(dev, encode(40003 + ord(cmd), ord(cmd), b"\x00"))
            assert r.cmd == ord(cmd) | 0x80 and r.payload == bytes([BAD_LENGTH]), cmd
        stats = dev.device_stats()
        assert stats["steps"] == 0 and stats["crc_errors"] == 5
        after = dev.get_params()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_an_mse_model_refuses_a_nan_target(builds) -> None:
    with open_program(builds["mse"]) as dev:
        before = dev.get_params()
        x = dev.encode_input(np.zeros((8, 8, 1), np.float32))
        for bad in (np.nan, np.inf):
            target = np.zeros(10, np.float32)
            target[4] = bad
            r = _reply(dev, encode(41000, ord("T"), target.tobytes() + x))
            assert r.payload == bytes([BAD_ARG])
            with pytest.raises(LinkError, match="argument out of range"):
                dev.train(np.zeros((8, 8, 1), np.float32), target)
        assert dev.device_stats()["steps"] == 0
        assert all(np.array_equal(v, dev.get_params()[k]) for k, v in before.items())
        dev.train(np.zeros((8, 8, 1), np.float32), np.zeros(10, np.float32))
        assert dev.device_stats()["steps"] == 1


