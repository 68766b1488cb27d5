"""The Arduino and PlatformIO exports built for a Cortex-M4F (the nRF52840's core) the way those
IDEs build libraries: arm-none-eabi-gcc for the C files with the ecosystem's flags (Arduino:
none of ours, the files carry a pragma; PlatformIO: library.json's build.flags), a C++ main
compiled and linked by arm-none-eabi-g++, and the ELF run bare metal on the M4F QEMU twin
(mps2-an386, semihosting): it trains as the host build does. The example sketch and main
compile too."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.ckernel import LINKER_SCRIPT, MEMORY, TARGETS
from tests.conftest import ROOT, tinytrain
from tests.library_helpers import (
    CKERNEL,
    DIGITS_ONNX,
    LIB_C,
    STEPS,
    build,
    digits,
    host_losses,
    model_defines,
    parse,
    write_samples,
)

TOOLS = ("arm-none-eabi-gcc", "arm-none-eabi-g++", "qemu-system-arm")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                reason=f"needs {', '.join(TOOLS)} (installed by .ci/run)")
MACHINE, M4F = TARGETS["m4"]  # -mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard
# How the IDEs compile a library's C and C++ (the Arduino nRF52 core's optimisation and
# dialects); neither passes -ffp-contract=off unless the library asks for it.
IDE_CFLAGS = ["-std=gnu11", "-Os", "-ffunction-sections", "-fdata-sections", "-Wall"]
IDE_CXXFLAGS = ["-std=gnu++17", "-Os", "-ffunction-sections", "-fdata-sections", "-Wall",
                "-fno-exceptions", "-fno-rtti"]
# Host (glibc) against the twin (newlib): expf/logf differ by an ulp now and then; the boards'
# parity tests bound the losses so (tests/test_boards.py) and measure about 1e-7.
LIBM_RTOL = 1e-5
ARDUINO_STUB = """\
// The few Arduino core names the example sketch uses, to compile it without a core.
#pragma once
#include <stdint.h>
struct SerialStub {
    void begin(unsigned long) {}
    void print(const char *) {}
    void print(float, int) {}
    void println(long) {}
};
extern SerialStub Serial;
void delay(unsigned long ms);
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("mcu")
    b = build(DIGITS_ONNX, d / "build", "--prefix", "digits", "--lr", "0.05")
    x, y = digits(STEPS, (1, 8, 8))
    write_samples(d / "samples.h", "samples", b, x, y)
    return {"dir": d, "build": b, "losses": host_losses(b, x, y)}


def _cc(cmd: list[str]) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0, f"{' '.join(cmd)}:\n{p.stderr}"


def _build_and_run(lib_srcs: list[Path], c_flags: list[str], work: Path, samples: Path) -> str:
    """Every .c of the library folders with gcc, the C++ main with g++, linked by g++ into
    an ELF for the M4F twin; returns what it printed."""
    work.mkdir()
    inc = [f"-I{d}" for d in lib_srcs]
    objs = []
    for src in [f for d in lib_srcs for f in sorted(d.glob("*.c"))]:
        objs.append(work / f"{src.parent.parent.name}_{src.stem}.o")
        _cc(["arm-none-eabi-gcc", *M4F, *c_flags, *inc, "-c", str(src), "-o", str(objs[-1])])
    for src in (CKERNEL / "semihost.c", ROOT / "boards" / "cortexm" / "startup.c"):
        objs.append(work / f"harness_{src.stem}.o")
        _cc(["arm-none-eabi-gcc", *M4F, "-std=c99", "-O2", f"-I{CKERNEL}", "-c", str(src),
             "-o", str(objs[-1])])
    objs.append(work / "main.o")
    _cc(["arm-none-eabi-g++", *M4F, *IDE_CXXFLAGS, "-DTT_SEMIHOST",
         *model_defines("digits", "digits_model.h"), *inc, f"-I{samples.parent}",
         f"-I{CKERNEL}", "-c", str(LIB_C / "train.cpp"), "-o", str(objs[-1])])
    ld = work / "m4.ld"
    ld.write_text(LINKER_SCRIPT % MEMORY["m4"])
    elf = work / "train.elf"
    _cc(["arm-none-eabi-g++", *M4F, "-nostartfiles", "--specs=nano.specs", "--specs=nosys.specs",
         f"-T{ld}", "-Wl,--gc-sections", "-o", str(elf), *map(str, objs), "-lm"])
    return _twin(elf)


def _twin(elf: Path) -> str:
    """Run an ELF bare metal on the M4F twin; what it printed through semihosting."""
    p = subprocess.run(["qemu-system-arm", "-M", MACHINE, "-nographic", "-monitor", "none",
                        "-serial", "none", "-semihosting-config", "enable=on,target=native",
                        "-kernel", str(elf)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    return p.stdout


def _check(out: str, reference) -> list[int]:
    run = parse(out)
    assert len(run.losses) == STEPS and len(run.out) == 10
    ref = np.array(reference["losses"], np.uint32).view(np.float32)
    np.testing.assert_allclose(run.loss_values(), ref, rtol=LIBM_RTOL, atol=0)
    return run.losses


@pytest.fixture(scope="module")
def exports(reference):
    out = {}
    for fmt in ("arduino", "platformio"):
        out[fmt] = reference["dir"] / fmt
        tinytrain("export-lib", reference["build"], "--format", fmt, "--out", out[fmt])
    return out


def test_arduino_and_platformio_libraries_train_on_the_m4f_twin(reference, exports, tmp_path):
    ard, pio = exports["arduino"], exports["platformio"]
    props = (ard / "digits_model" / "library.properties").read_text()
    assert "name=digits_model\n" in props and "includes=digits_model.h\n" in props
    assert "name=tinytrain_runtime\n" in (ard / "tinytrain_runtime" / "library.properties") \
        .read_text()
    for f in ard.rglob("*.c"):
        runtime = f.parent.parent.name == "tinytrain_runtime"
        want = '"O2", "fp-contract=off"' if runtime else '"fp-contract=off"'
        assert f"#pragma GCC optimize({want})" in f.read_text(), f
    arduino = _build_and_run([ard / "digits_model" / "src", ard / "tinytrain_runtime" / "src"],
                             IDE_CFLAGS, tmp_path / "arduino", reference["dir"] / "samples.h")

    meta = {lib: json.loads((pio / lib / "library.json").read_text())
            for lib in ("digits_model", "tinytrain_runtime")}
    assert meta["digits_model"]["name"] == "digits_model"
    flags = meta["tinytrain_runtime"]["build"]["flags"]
    assert "-ffp-contract=off" in flags and "-O2" in flags
    assert "-ffp-contract=off" in meta["digits_model"]["build"]["flags"]
    assert not any("pragma GCC optimize" in f.read_text() for f in pio.rglob("*.c"))
    platformio = _build_and_run([pio / "digits_model" / "src",
                                 pio / "tinytrain_runtime" / "src"], IDE_CFLAGS + flags,
                                tmp_path / "platformio", reference["dir"] / "samples.h")
    # both configurations compute without fused multiply-adds: the same bits
    assert _check(arduino, reference) == _check(platformio, reference)


def test_cmake_export_cross_compiles_for_the_m4f_in_debug(reference, tmp_path):
    """A Debug build (-O0 -g for the project) with arm-none-eabi-gcc: the kernels still get
    -O2 (their inline assembly needs it) and -ffp-contract=off, and the program trains on
    the twin."""
    lib = tmp_path / "digits_cmake"
    tinytrain("export-lib", reference["build"], "--format", "cmake", "--out", lib)
    (tmp_path / "m4.ld").write_text(LINKER_SCRIPT % MEMORY["m4"])
    app = tmp_path / "app"
    app.mkdir()
    (app / "CMakeLists.txt").write_text(f"""
cmake_minimum_required(VERSION 3.13)
project(m4 C CXX)
add_subdirectory({lib} digits)
add_executable(train.elf {LIB_C}/train.cpp {CKERNEL}/semihost.c {ROOT}/boards/cortexm/startup.c)
target_compile_definitions(train.elf PRIVATE TT_SEMIHOST MODEL=digits MODEL_UP=DIGITS
                           MODEL_HEADER="digits_model.h")
target_include_directories(train.elf PRIVATE {reference["dir"]} {CKERNEL})
target_compile_options(train.elf PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-exceptions -fno-rtti>)
target_link_libraries(train.elf PRIVATE digits_model)
""")
    flags = " ".join(M4F)
    link = f"-nostartfiles --specs=nano.specs --specs=nosys.specs -T{tmp_path / 'm4.ld'}"
    b = tmp_path / "b"
    for cmd in (["cmake", "-S", str(app), "-B", str(b), "-DCMAKE_BUILD_TYPE=Debug",
                 "-DCMAKE_SYSTEM_NAME=Generic", "-DCMAKE_C_COMPILER=arm-none-eabi-gcc",
                 "-DCMAKE_CXX_COMPILER=arm-none-eabi-g++", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
                 "-DCMAKE_TRY_COMPILE_TARGET_TYPE=STATIC_LIBRARY", f"-DCMAKE_C_FLAGS={flags}",
                 f"-DCMAKE_CXX_FLAGS={flags}", f"-DCMAKE_EXE_LINKER_FLAGS={link}"],
                ["cmake", "--build", str(b), "-j", "2"]):
        _cc(cmd)
    for c in json.loads((b / "compile_commands.json").read_text()):
        args = c["command"].split()
        if "/runtime/" in c["file"] or c["file"].endswith("digits_model.c"):
            assert "-ffp-contract=off" in args, c["file"]
        if "/runtime/" in c["file"]:  # the last -O level is the one GCC uses
            assert [a for a in args if a.startswith("-O")][-1] == "-O2", c["command"]
    _check(_twin(b / "train.elf"), reference)


def test_example_sketch_and_main_compile_for_the_m4f(exports, tmp_path):
    ard, pio = exports["arduino"], exports["platformio"]
    (tmp_path / "Arduino.h").write_text(ARDUINO_STUB)
    sketch = ard / "digits_model" / "examples" / "digits_train" / "digits_train.ino"
    _cc(["arm-none-eabi-g++", *M4F, *IDE_CXXFLAGS, "-Werror", "-x", "c++", "-include",
         "Arduino.h", f"-I{tmp_path}", f"-I{ard / 'digits_model' / 'src'}", "-c", str(sketch),
         "-o", str(tmp_path / "sketch.o")])
    main = pio / "digits_model" / "examples" / "train" / "main.cpp"
    _cc(["arm-none-eabi-g++", *M4F, *IDE_CXXFLAGS, "-Werror",
         f"-I{pio / 'digits_model' / 'src'}", "-c", str(main), "-o", str(tmp_path / "main.o")])
    nm = subprocess.run(["arm-none-eabi-nm", str(tmp_path / "sketch.o")], capture_output=True,
                        text=True, check=True).stdout
    assert " U digits_train_step\n" in nm and " U digits_init\n" in nm  # C names, unmangled
    assert " T setup" in nm or " T _Z5setupv" in nm
