"""The worst-case stack estimate follows calls through pointers (firmware_size.stack_depth with
address_taken): GCC's call graph sends each to one placeholder node, which alone would count
as a small leaf. A small program compiled with arm-none-eabi-gcc's -fcallgraph-info."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tinytrain.device.firmware_size import (
    EXCEPTION_FRAME,
    address_taken,
    stack_depth,
)

CC, READELF = "arm-none-eabi-gcc", "arm-none-eabi-readelf"
BIG, CALLED, HANDLER = 1500, 300, 4000  # bytes of the locals below

PROGRAM = f"""
#include <stdint.h>
typedef void (*fn)(volatile uint8_t *);
static void deep(volatile uint8_t *p) {{
    volatile uint8_t b[{BIG}];
    b[0] = *p; *p = b[{BIG} - 1];
}}
static void shallow(volatile uint8_t *p) {{ *p += 1; }}
void called(volatile uint8_t *p) {{
    volatile uint8_t b[{CALLED}];
    b[0] = *p; *p = b[{CALLED} - 1];
}}
/* only the vector table takes its address: an entry, not a pointer call's target */
void Handler(void) {{
    volatile uint8_t b[{HANDLER}];
    b[0] = 1;
}}
__attribute__((section(".isr_vector"), used)) void (*const vectors[1])(void) = {{Handler}};
fn volatile chosen;
int main(int k) {{
    volatile uint8_t x = 0;
    called(&x);
    chosen = k ? deep : shallow;
    chosen(&x);
    return x;
}}
"""


def _compile(d: Path, *flags: str) -> Path:
    if shutil.which(CC) is None:
        pytest.skip(f"{CC} is not installed")
    (d / "p.c").write_text(PROGRAM)
    subprocess.run([CC, "-mcpu=cortex-m7", "-mthumb", "-O2", "-ffunction-sections",
                    "-fdata-sections", "-fcallgraph-info=su", *flags, "-c", "p.c", "-o", "p.o"],
                   cwd=d, check=True)
    return d


@pytest.fixture(scope="module")
def objs(tmp_path_factory) -> Path:
    return _compile(tmp_path_factory.mktemp("stack"))


@pytest.mark.parametrize("flags", [(), ("-g", "-funwind-tables")])
def test_address_taken_is_the_pointer_targets(flags, tmp_path):
    """called is only called, Handler only in the vector table, main only an entry; debug
    information and unwind tables name every function without taking its address."""
    assert address_taken(_compile(tmp_path, *flags), READELF) == {"deep", "shallow"}


def test_a_call_through_a_pointer_counts_its_deepest_target(objs):
    s = stack_depth(objs, indirect_targets=address_taken(objs, READELF))
    assert s["chain"] == ["main", "(through a pointer)", "deep"]
    assert BIG + EXCEPTION_FRAME < s["bytes"] < BIG + CALLED + EXCEPTION_FRAME
    # what GCC's graph alone says: the pointer call a small leaf, `called` the deepest
    plain = stack_depth(objs)
    assert plain["chain"] == ["main", "called"]
    assert plain["bytes"] < BIG

