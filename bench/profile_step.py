"""Where one training step's instructions go, per function and per basic block, on a build's
QEMU twin (tinytrain/device/trace_profile.py: QEMU's execution trace, exact counts).

    python bench/profile_step.py BUILD_DIR [--data samples.npz] [--top 25] [--blocks 15]
        [--json FILE] [--trace FILE]

BUILD_DIR is a firmware build (`tinytrain build MODEL --board stm32f746 --out BUILD_DIR`).
The per-op table of `tinytrain bench BUILD_DIR --qemu` says which op to look at; this says
which function and which block inside it, and with `arm-none-eabi-objdump -d
BUILD_DIR/firmware_qemu.elf` each hot block's code. The trace also holds the boot and the
sample's transfer (the firmware's link code, not in the step's count): the source column
tells them apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tinytrain.device.trace_profile import profile_step  # noqa: E402


def table(res: dict, top: int, blocks: int) -> str:
    step = res["step_instructions"]
    lines = [f"step: {step:,} instructions (the firmware's count); traced "
             f"{res['traced_instructions']:,} (boot, hello and the sample's transfer included)",
             "",
             "| function | source | instructions | of the step |", "|---|---|---:|---:|"]
    for f in res["functions"][:top]:
        lines.append(f"| {f['function']} | {f['source']} | {f['instructions']:,} | "
                     f"{100 * f['instructions'] / step:.1f} % |")
    lines += ["", "| block | function | instructions a run | runs | instructions |",
              "|---|---|---:|---:|---:|"]
    for b in res["blocks"][:blocks]:
        lines.append(f"| 0x{b['pc']:x} | {b['function']} | {b['size']} | {b['runs']:,} | "
                     f"{b['instructions']:,} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir", type=Path)
    ap.add_argument("--data", type=Path, help="an .npz of samples (the first one trains)")
    ap.add_argument("--top", type=int, default=25, help="functions listed")
    ap.add_argument("--blocks", type=int, default=15, help="hottest blocks listed")
    ap.add_argument("--json", type=Path, help="write every function and block here")
    ap.add_argument("--trace", type=Path, help="keep QEMU's trace here")
    a = ap.parse_args()
    res = profile_step(a.build_dir, a.data, trace=a.trace)
    print(table(res, a.top, a.blocks))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
