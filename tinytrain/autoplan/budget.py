"""The SRAM budget a plan must fit: the figure `tinytrain build` checks against it.

A plan's SRAM is report["sram_bytes"]["total"]: arena, trainable parameters, gradients,
optimizer state and, on a board, the serial link's buffers and the reserved stack. With
`--max-sram` the build compares exactly that figure, so the budget is `--max-sram` itself. A
board's own capacity is judged by its linker, which also counts what no plan holds: the
firmware's statics, newlib's data and alignment padding (a few hundred bytes, measured on
every firmware build as `unplanned_sram`), so those are set aside first.
"""

from __future__ import annotations

from tinytrain.boards import UNPLANNED_SRAM_ALLOWANCE, Board, sram_limits
from tinytrain.errors import OptionError

__all__ = ["UNPLANNED_SRAM_ALLOWANCE", "sram_budget"]


def sram_budget(board: Board, max_sram: int | None) -> tuple[int, str]:
    """(bytes, where the figure comes from)."""
    limits = sram_limits(board, max_sram)
    if not limits:
        raise OptionError(f"--update auto needs a memory budget: board {board.name} has no SRAM "
                          "limit, so give --max-sram KB (e.g. --max-sram 256)")
    return min(limits)
