"""What an exported library is made of, read from a build directory: the model's C under its
prefix's file names, the runtime kernels, and the compile flags they need."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinytrain.device.runner import load_program_info
from tinytrain.errors import BuildError

# What the C needs from any build system, as templates/Makefile.j2 compiles it: no fused
# multiply-add, so results are the host build's and the twins' bit for bit (GCC's default
# outside ISO C modes is -ffp-contract=fast, which turns a*b + c into one FMA).
REQUIRED_FLAGS = ("-ffp-contract=off",)
# One section per function and object: a project linking with --gc-sections keeps only the
# kernels its models call (the runtime is shared whole between models).
SECTION_FLAGS = ("-ffunction-sections", "-fdata-sections")
# The runtime at -O2 whatever the project's level, for speed: the kernels compile at any level,
# but at -O0 and -Os the depthwise kernel leaves its DSP inline assembly for its portable C
# (GCC 12 cannot allocate the assembly's registers there; see TT_DW_DSP in tt_q8_dw_opt.c),
# the same results in more instructions. The build systems place it after their own -O level.
RUNTIME_OPT = "-O2"
MODEL_FLAGS = REQUIRED_FLAGS + SECTION_FLAGS
RUNTIME_FLAGS = (RUNTIME_OPT, *MODEL_FLAGS)


def pragma(optimize: str) -> str:
    """Arduino has no per-library compiler flags: a C file's first lines stand for them."""
    flags = "-O2 -ffp-contract=off" if "O2" in optimize else "-ffp-contract=off"
    return f"""\
/* tinytrain export-lib: Arduino has no per-library compiler flags, so these lines stand for
 * {flags} (see the export's README). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize({optimize})
#endif
"""


# A build made with --fp32-mac fused computes the channel-streamed 1x1 sums with fused
# multiply-adds (TT_F32_FMA, runtime_c/reference/tt_reference.h): its exported runtime gets
# that default, so no build system has to pass a macro (one setting per project's runtime).
FMA_DEFAULT = ("#ifndef TT_F32_FMA\n#define TT_F32_FMA 0\n#endif",
               "#ifndef TT_F32_FMA\n#define TT_F32_FMA 1 /* exported from a --fp32-mac fused build "
               "*/\n#endif")

MODEL_PRAGMA = pragma('"fp-contract=off"')
RUNTIME_PRAGMA = pragma('"O2", "fp-contract=off"')  # -O2: see RUNTIME_OPT
_INCLUDE = '#include "model.h"\n'


@dataclass(frozen=True)
class LibrarySources:
    prefix: str
    info: dict[str, Any]  # the build's program.json
    model_c: str  # includes "<prefix>_model.h"
    model_h: str
    runtime: dict[str, str]  # file name -> text: every tt_*.c and .h of the build

    @property
    def header(self) -> str:
        return f"{self.prefix}_model.h"

    @property
    def source(self) -> str:
        return f"{self.prefix}_model.c"

    @property
    def runtime_sources(self) -> list[str]:
        return sorted(n for n in self.runtime if n.endswith(".c"))

    def api(self) -> list[str]:
        """The header's function declarations, one per line (for the README)."""
        decls = re.findall(rf"^(?:const )?[\w ]+?\*?{self.prefix}_\w+\([^;]*\);",
                           self.model_h, re.M)
        return [" ".join(d.split()) for d in decls]


def load_sources(build_dir: Path) -> LibrarySources:
    """The library files of a build made by `tinytrain build` (any board: the model's C does
    not depend on it)."""
    build_dir = Path(build_dir)
    info = load_program_info(build_dir)
    if "c_prefix" not in info:
        raise BuildError(f"{build_dir} was built by an older tinytrain whose C is not a "
                         "library yet (no extern \"C\", no --prefix); rebuild it with "
                         "`tinytrain build`")
    prefix = str(info["c_prefix"])
    try:
        model_c = (build_dir / "model.c").read_text()
        model_h = (build_dir / "model.h").read_text()
        runtime = {p.name: p.read_text() for p in sorted((build_dir / "runtime").glob("*.[ch]"))}
    except (OSError, UnicodeDecodeError) as e:
        raise BuildError(f"{build_dir} is an incomplete build ({e}); rebuild it with "
                         "`tinytrain build`") from None
    if model_c.count(_INCLUDE) != 1 or "tt_kernels.h" not in runtime or \
            runtime.get("tt_reference.h", "").count(FMA_DEFAULT[0]) != 1:
        raise BuildError(f"{build_dir}'s model.c or runtime/ is not what `tinytrain build` "
                         "wrote; rebuild it")
    if info.get("fp32_mac") == "fused":
        runtime["tt_reference.h"] = runtime["tt_reference.h"].replace(*FMA_DEFAULT)
    return LibrarySources(prefix, info, model_c.replace(_INCLUDE, f'#include "{prefix}_model.h"\n'),
                          model_h, runtime)
