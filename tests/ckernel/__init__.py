"""Run a kernel test program, the same C, on the host and on the QEMU twins.

A test program includes "harness.h", checks what it wants and calls th_exit(status). On the
twins it runs bare metal (boards/cortexm/startup.c, semihosting for output and the exit code)
with the boards' compiler flags, so Cortex-M only code paths (the DSP extension's intrinsics)
are exercised exactly as in firmware; `-icount shift=0` makes SysTick an instruction counter.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tinytrain.assets import runtime_dirs, runtime_files
from tinytrain.device import objcache

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RUNTIME = runtime_files()  # file name -> path, across runtime_c/reference and optimized
RUNTIME_INC = [f"-I{d}" for d in runtime_dirs()]
RUNTIME_SOURCES = [str(p) for n, p in RUNTIME.items() if n.endswith(".c")]  # every kernel

CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off",
          "-ffunction-sections", "-fdata-sections"]
TARGETS = {  # QEMU machine and the boards' flags (boards/*.toml)
    "m7": ("mps2-an500", ["-mcpu=cortex-m7", "-mthumb", "-mfpu=fpv5-sp-d16",
                          "-mfloat-abi=hard", "-DTT_FPV5"]),
    "m4": ("mps2-an386", ["-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16",
                          "-mfloat-abi=hard"]),
    # Corstone-300: Helium (MVE) besides the DSP extension and FPv5
    "m55": ("mps3-an547", ["-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard", "-DTT_FPV5",
                           "-DTH_TICK_CENTI=3125u"]),  # SysTick at 32 MHz: 31.25 a tick
}
TWINS = ("m7", "m4", "m55")  # every QEMU twin a kernel test can run on
# code and data memories: the MPS2 images' 4 MB SSRAMs; the AN547's 512 KB ITCM (where its
# reset vector is) and 16 MB of its DDR at 0x60000000 (the sweeps' buffers outgrow the DTCM)
MEMORY = {"m7": ("0x00000000", "4M", "0x20000000", "4M"),
          "m4": ("0x00000000", "4M", "0x20000000", "4M"),
          "m55": ("0x00000000", "512K", "0x60000000", "16M")}
LINKER_SCRIPT = """
MEMORY { FLASH (rx) : ORIGIN = %s, LENGTH = %s
         RAM (rwx) : ORIGIN = %s, LENGTH = %s }
SECTIONS {
  .text : { KEEP(*(.isr_vector)) *(.text*) *(.rodata*) . = ALIGN(4); } > FLASH
  _sidata = LOADADDR(.data);
  .data : { _sdata = .; *(.data*) . = ALIGN(4); _edata = .; } > RAM AT > FLASH
  .bss (NOLOAD) : { _sbss = .; *(.bss*) *(COMMON) . = ALIGN(4); _ebss = .; } > RAM
  end = .;
  _estack = ORIGIN(RAM) + LENGTH(RAM);
}
"""
RUN_TIMEOUT = 600  # seconds: a kernel sweep under QEMU's -icount is slow, never this slow


@dataclass
class Result:
    returncode: int
    stdout: str


def available(target: str) -> bool:
    if target == "host":
        return shutil.which("gcc") is not None
    return shutil.which("arm-none-eabi-gcc") is not None and \
        shutil.which("qemu-system-arm") is not None


def twins(names: tuple[str, ...] = TWINS) -> list:
    """pytest parameters for a kernel test on the QEMU twins (skipped where arm-none-eabi-gcc
    or QEMU is missing)."""
    import pytest

    twin = pytest.mark.skipif(not available("m7"), reason="needs arm-none-eabi-gcc and QEMU")
    return [pytest.param(t, marks=twin) for t in names]


def every_target() -> list:
    """pytest parameters for a kernel test on the host and every twin."""
    return ["host", *twins()]


def run(program: Path, target: str, work: Path, sources: list[Path] = (),
        defines: list[str] = (), opt: str = "-O2") -> Result:
    """Compile `program` with `sources` (e.g. runtime_c files) for target host/m7/m4 at the
    optimisation level `opt` and run it; returns its exit code and output."""
    work.mkdir(parents=True, exist_ok=True)
    inc = [f"-I{HERE}", *RUNTIME_INC]
    srcs = [str(program), *map(str, sources)]
    defs = [f"-D{d}" for d in defines] + [opt]  # after CFLAGS' -O2: the last -O counts
    if target == "host":
        exe = work / f"{program.stem}_host"
        subprocess.run(["gcc", *CFLAGS, *defs, *inc, "-o", str(exe), *srcs,
                        str(HERE / "host.c"), "-lm"], check=True, capture_output=True,
                       text=True)
        p = subprocess.run([str(exe)], capture_output=True, text=True, timeout=RUN_TIMEOUT)
        return Result(p.returncode, p.stdout)
    machine, flags = TARGETS[target]
    ld = work / "kernel_test.ld"
    ld.write_text(LINKER_SCRIPT % MEMORY[target])
    elf = work / f"{program.stem}_{target}.elf"
    subprocess.run(["arm-none-eabi-gcc", *CFLAGS, *flags, *defs, *inc, "-nostartfiles",
                    "--specs=nano.specs", "--specs=nosys.specs", f"-T{ld}",
                    "-Wl,--gc-sections", "-o", str(elf), *srcs, str(HERE / "semihost.c"),
                    str(ROOT / "boards" / "cortexm" / "startup.c"), "-lm"],
                   check=True, capture_output=True, text=True)
    p = subprocess.run(["qemu-system-arm", "-M", machine, "-nographic", "-monitor", "none",
                        "-serial", "none", "-icount", "shift=0",
                        "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=RUN_TIMEOUT)
    return Result(p.returncode, p.stdout)


def runtime_objects(factory, cflags: list[str]) -> list[str]:
    """Every runtime_c source compiled for the host with `cflags` and -fPIC, once per pytest
    session (tests/shared.py) and through the compiler cache (tinytrain.device.objcache), a
    gcc per core: the C harnesses that link all kernels into a shared library then compile only
    their own unit file instead of the 28 kernel files each (~12 s a module)."""
    from tests.shared import shared_dir

    flags = [*cflags, "-fPIC", *RUNTIME_INC]
    tag = hashlib.sha256("\0".join(flags).encode()).hexdigest()[:12]

    def compile_one(src: str, d: Path) -> None:
        obj = Path(src).stem + ".o"  # relative: the cache's key holds every argument
        res = objcache.compile_call(["gcc", *flags, "-c", src, "-o", obj], d)
        assert res.returncode == 0, f"{src}:\n{res.stderr.decode()}"

    def make(d: Path) -> None:
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(lambda src: compile_one(src, d), RUNTIME_SOURCES))

    d = shared_dir(factory, f"runtime_objects_{tag}", make)
    return [str(d / (Path(src).stem + ".o")) for src in RUNTIME_SOURCES]


def checksums(program: Path, target: str, work: Path, sources: list[Path]) -> dict[str, str]:
    """Run a program that compares optimised kernels with the reference and prints
    "ck <case> <hash>" per output and "failures N" at the end: its hashes, after checking that
    it found no mismatch."""
    res = run(program, target, work, sources=sources)
    assert res.returncode == 0, res.stdout[-4000:]
    assert "failures 0" in res.stdout
    return dict(re.findall(r"^ck (\S+) ([0-9a-f]{8})$", res.stdout, re.M))
