"""Host builds under AddressSanitizer and UndefinedBehaviorSanitizer, for tests.

`rebuild(dir)` recompiles a host build's tt_host with the sanitizers (the generated Makefile
takes CFLAGS); `env(log)` makes every report abort the program and land in files named
log.*, which `reports(log)` reads back. GCC's -fsanitize=undefined leaves out
float-cast-overflow (NaN or out-of-range float -> int), so it is added explicitly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tinytrain.codegen.render import HOST_BINARY
from tinytrain.device.toolchain import run_make

FLAGS = ("-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all "
         "-fno-omit-frame-pointer -g")


def rebuild(build_dir: Path) -> bool:
    """Recompile build_dir/tt_host with the sanitizers; False if this gcc has no runtime."""
    shutil.rmtree(build_dir / "obj", ignore_errors=True)  # objects of other flags
    (build_dir / HOST_BINARY).unlink(missing_ok=True)
    # debug info relative to the build, so every build shares the cached objects
    prefix = f"-ffile-prefix-map={Path(build_dir).resolve()}=."
    return run_make(build_dir, [f"CFLAGS=$(CFLAGS_COMMON) {FLAGS} {prefix}"]).returncode == 0


def env(log: Path) -> dict[str, str]:
    return {"ASAN_OPTIONS": f"log_path={log}:abort_on_error=0:detect_leaks=1",
            "UBSAN_OPTIONS": f"log_path={log}:halt_on_error=1:print_stacktrace=1"}


def reports(log: Path) -> str:
    """Every sanitizer report written so far (empty: none)."""
    return "".join(p.read_text(errors="replace") for p in sorted(log.parent.glob(log.name + "*")))
