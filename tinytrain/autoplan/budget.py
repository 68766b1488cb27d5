"""The SRAM budget a plan must fit: the figure `tinytrain build` checks against it.

A plan's SRAM is report["sram_bytes"]["total"]: arena, trainable parameters, gradients,
optimizer state and, on a board, the serial link's buffers and the reserved stack. With
`--max-sram` the build compares exactly that figure, so the budget is `--max-sram` itself. A
board's own capacity is judged by its linker, which also counts what no plan holds: the
firmware's statics, newlib's data and alignment padding (a few hundred bytes, measured on
every firmware build as `unplanned_sram`), so those are set aside first.
"""

from __future__ import annotations

from tinytrain.boards import Board
from tinytrain.errors import OptionError

# SRAM the linked firmware holds besides the plan: the link's counters, and newlib's
# reentrancy struct (~1.1 KB) when libm's errno pulls it in; the firmware tests bound it by
# 2 KB (tests/test_boards.py UNPLANNED_SRAM), so a plan within capacity - 2 KB links.
UNPLANNED_SRAM_ALLOWANCE = 2048


def sram_budget(board: Board, max_sram: int | None) -> tuple[int, str]:
    """(bytes, where the figure comes from)."""
    limits = []
    if max_sram is not None:
        limits.append((max_sram, f"--max-sram {max_sram / 1024:g} KB"))
    if board.sram_bytes is not None:
        allowance = UNPLANNED_SRAM_ALLOWANCE if board.is_mcu else 0
        limits.append((board.sram_bytes - allowance,
                       f"{board.name}'s {board.sram_bytes // 1024} KB of SRAM"
                       + (f" less {allowance} B for the firmware's own statics, newlib and "
                          "alignment" if allowance else "")))
    if not limits:
        raise OptionError(f"--update auto needs a memory budget: board {board.name} has no SRAM "
                          "limit, so give --max-sram KB (e.g. --max-sram 256)")
    return min(limits)
