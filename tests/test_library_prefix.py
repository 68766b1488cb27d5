"""`tinytrain build --prefix NAME`: the generated model's names, symbols and guard, the aliases
our own firmware uses, the host build and the QEMU twin training exactly as with the default
prefix, and the .bin / .hex images beside each firmware ELF."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from tests.library_helpers import (
    DIGITS_ONNX,
    HOST_CFLAGS,
    STEPS,
    build,
    compile_host,
    digits,
    host_losses,
)
from tinytrain.codegen.render import API_MACROS, API_NAMES, INT8_INPUT_MACROS, INT8_INPUT_NAMES
from tinytrain.device.flashing import load_elf
from tinytrain.device.runner import open_program

needs_arm = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """The digits CNN for the host: fp32 with the default prefix and with `digits`, and int8
    (quantised on digits samples) with `dq`."""
    d = tmp_path_factory.mktemp("prefix")
    x, _ = digits(64, (1, 8, 8), start=500)
    np.savez(d / "calib.npz", x=x)
    return {
        "tt": build(DIGITS_ONNX, d / "tt", "--lr", "0.05"),
        "digits": build(DIGITS_ONNX, d / "digits", "--lr", "0.05", "--prefix", "digits"),
        "dq": build(DIGITS_ONNX, d / "dq", "--lr", "0.05", "--prefix", "dq", "--quantize",
                    "int8", "--calib", str(d / "calib.npz")),
    }


@pytest.mark.parametrize("prefix", ["Digits", "1net", "my-net", "_net", "a__b", "net_", "tt_x",
                                    "a" * 25, ""])
def test_bad_prefix_is_refused_before_compiling(prefix, tmp_path, cli):
    p = cli("build", DIGITS_ONNX, "--out", tmp_path / "b", "--prefix", prefix, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "--prefix" in p.stderr and "cannot name the model's C symbols" in p.stderr
    assert not (tmp_path / "b").exists()


def _declared(header: str) -> set[str]:
    """Every name model.h defines outside its alias block (macros, types, functions)."""
    body = header.split("#ifdef TT_MODEL_ALIASES")[0]
    names = set(re.findall(r"^#define (\w+)", body, re.M))
    names |= set(re.findall(r"^typedef [^;{\n]*?\b(\w+)(?:\)\(.*\))?;", body, re.M))
    names |= set(re.findall(r"^} (\w+);", body, re.M))
    names |= set(re.findall(r"^(?:const )?\w+ \*?(\w+)\(", body, re.M))
    return names


@pytest.mark.parametrize("prefix", ["digits", "dq"])
def test_header_names_guard_and_aliases(prefix, builds):
    h = (builds[prefix] / "model.h").read_text()
    up = prefix.upper()
    assert f"#ifndef {up}_MODEL_H\n#define {up}_MODEL_H" in h
    assert '#ifdef __cplusplus\nextern "C" {\n#endif' in h
    names = _declared(h) - {f"{up}_MODEL_H"}
    assert names and all(n.startswith((f"{prefix}_", f"{up}_")) for n in names), names
    aliases = dict(re.findall(r"^#define (tt_\w+|TT_\w+) (\w+)$",
                              h.split("#ifdef TT_MODEL_ALIASES")[1], re.M))
    # every public name has its tt_* alias for our firmware, and nothing else is aliased
    assert set(aliases.values()) == names | {f"{prefix}_profile_ticks"}
    assert all(v == k.replace("tt_", f"{prefix}_", 1).replace("TT_", f"{up}_", 1)
               for k, v in aliases.items())
    int8 = prefix == "dq"
    want = len(API_NAMES) + len(API_MACROS) + int8 * len(INT8_INPUT_NAMES + INT8_INPUT_MACROS)
    assert len(aliases) == want
    assert (f"#define {up}_INPUT_INT8 {int(int8)}" in h) and \
        f"#define {up}_INPUT_DTYPE {up}_DTYPE_{'S8' if int8 else 'F32'}" in h
    default = (builds["tt"] / "model.h").read_text()
    assert "TT_MODEL_ALIASES" not in default and "#ifndef TT_MODEL_H" in default


@pytest.mark.parametrize("prefix", ["tt", "digits", "dq"])
@pytest.mark.parametrize("profile", [False, True], ids=["plain", "TT_PROFILE"])
def test_every_global_symbol_of_the_model_object_has_the_prefix(prefix, profile, builds,
                                                                 tmp_path):
    b = builds[prefix]
    obj = tmp_path / "model.o"
    subprocess.run(["gcc", *HOST_CFLAGS, *(["-DTT_PROFILE"] if profile else []),
                    f"-I{b}", f"-I{b / 'runtime'}", "-c", str(b / "model.c"), "-o", str(obj)],
                   check=True)
    nm = subprocess.run(["nm", "--defined-only", "-g", str(obj)], capture_output=True,
                        text=True, check=True).stdout
    names = [ln.split()[-1] for ln in nm.splitlines() if ln.strip()]
    assert f"{prefix}_train_step" in names and f"{prefix}_set_lr" in names
    assert (f"{prefix}_profile_ticks" in names) == profile
    assert all(n.startswith(f"{prefix}_") for n in names), names
    local = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True,
                           text=True, check=True).stdout
    assert re.search(rf"\b[bBdD] {prefix}_arena$", local, re.M), "the arena is not named so"


def test_prefixed_host_build_trains_as_the_default(builds):
    x, y = digits(STEPS, (1, 8, 8))
    assert host_losses(builds["digits"], x, y) == host_losses(builds["tt"], x, y)


def _hex_bytes(path) -> dict[int, int]:
    """Intel HEX records (data, extended linear address) -> {address: byte}."""
    out, base = {}, 0
    for line in path.read_text().split():
        rec = bytes.fromhex(line[1:])
        n, addr, kind, data = rec[0], int.from_bytes(rec[1:3], "big"), rec[3], rec[4:4 + rec[0]]
        assert sum(rec) & 0xFF == 0, "bad checksum"
        if kind == 0:
            out.update({base + addr + i: data[i] for i in range(n)})
        elif kind == 4:
            base = int.from_bytes(data, "big") << 16
    return out


@needs_arm
def test_prefixed_firmware_runs_on_the_twin_with_bin_and_hex(tmp_path, cli):
    fw = {p: build(DIGITS_ONNX, tmp_path / p, "--board", "nrf52840", "--lr", "0.05",
                   "--prefix", p) for p in ("tt", "digits")}
    x, y = digits(STEPS, (1, 8, 8))
    losses = {}
    for p, b in fw.items():
        with open_program(b, qemu=True) as dev:
            losses[p] = [dev.train(xi, yi)[0] for xi, yi in zip(x, y)]
    assert losses["digits"] == losses["tt"]
    b = fw["digits"]
    report = json.loads((b / "report.json").read_text())
    assert report["programs"] == [f"{e}.{k}" for e in ("firmware", "firmware_qemu")
                                  for k in ("elf", "bin", "hex")]
    for elf in ("firmware", "firmware_qemu"):
        segments = load_elf(b / f"{elf}.elf")
        image = _hex_bytes(b / f"{elf}.hex")
        want = {a + i: v for a, data in segments for i, v in enumerate(data)}
        assert image == want, f"{elf}.hex does not hold the ELF's loadable bytes"
        raw = (b / f"{elf}.bin").read_bytes()
        start = min(want)
        assert len(raw) == max(want) + 1 - start
        assert all(raw[a - start] == v for a, v in want.items())
        gaps = set(range(start, start + len(raw))) - set(want)
        assert all(raw[a - start] == 0xFF for a in gaps), "gaps must read as erased flash"


def test_int8_export_example_quantizes_and_trains(builds, tmp_path, cli):
    """The exported example of an int8 model feeds int8 codes (dq_quantize_input) and its
    loss falls as it trains on one sample."""
    lib = tmp_path / "dq_cmake"
    cli("export-lib", builds["dq"], "--format", "cmake", "--out", lib)
    main = (lib / "example" / "main.c").read_text()
    assert "dq_quantize_input(x, reading, DQ_INPUT_SIZE);" in main
    h = (lib / "dq" / "dq_model.h").read_text()
    assert "typedef int8_t dq_input_t;" in h and "#define DQ_INPUT_INT8 1" in h
    exe = compile_host(tmp_path / "example", [lib / "example" / "main.c", lib / "dq" /
                                              "dq_model.c", *sorted((lib / "runtime").glob("*.c"))],
                       [lib / "dq", lib / "runtime"], [])
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    losses = [float(ln.split()[3]) for ln in out.splitlines() if ln.startswith("step")]
    assert len(losses) == 20 and losses[-1] < 0.5 * losses[0]
