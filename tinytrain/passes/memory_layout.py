"""Where each persistent tensor lives in the generated C: flash (const) or SRAM, its C symbol,
the serial link's buffers and the training-state table. The planner's arena is the rest of
the SRAM (memory_plan.py); both decide what a plan costs, so both sit with the passes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tinytrain.ir import CONST, OPT_STATE, PARAM, PARAM_GRAD, Graph, Tensor
from tinytrain.passes.fleet_correction import is_fleet_state
from tinytrain.passes.receive import received

if TYPE_CHECKING:
    from tinytrain.boards import Board

PREFIX = {PARAM: "tt_p_", CONST: "tt_c_", PARAM_GRAD: "tt_g_", OPT_STATE: "tt_m_"}


def c_symbol(t: Tensor) -> str:
    base = t.name
    if t.kind == PARAM_GRAD and base.endswith("_grad"):
        base = base[: -len("_grad")]
    if t.kind == OPT_STATE and base.endswith("_momentum"):
        base = base[: -len("_momentum")]
    return PREFIX[t.kind] + re.sub(r"[^0-9A-Za-z_]", "_", base)


def in_flash(t: Tensor) -> bool:
    return t.kind == CONST or (t.kind == PARAM and not t.trainable)


LINK_CHUNK, LINK_PROFILE_CHUNK = 256, 64  # firmware/tt_link.{h,c}
# firmware/tt_checkpoint.c's open receive: four words
RECEIVE_STATE = 4 * 4


def link_buffer_bytes(g: Graph) -> int:
    """The link's receive and reply buffers, sized as firmware/tt_link.c sizes them. A sample
    is not among them: its rows go from the frame straight into the model's input buffer."""
    n_out = int(np.prod(g.t(g.meta.get("infer_output") or g.outputs[0]).shape))
    label = next(t for t in g.tensors.values() if t.kind == "label")
    rx = 4 + max(label.nbytes, 4 + LINK_CHUNK, 16) + 4
    tx = 4 + 1 + max(n_out * 4, LINK_CHUNK, 4 + 4 * LINK_PROFILE_CHUNK, 64) + 4
    return -(-rx // 4) * 4 + -(-tx // 4) * 4


def constant_sram(g: Graph, board: Board) -> dict[str, int]:
    """The SRAM components besides the arena, by their names in report.json's sram_bytes:
    trainable parameters, their gradient accumulators and optimizer state, and on a board the
    firmware around the model (the link's buffers and the reserved stack)."""
    ts = list(g.tensors.values())
    sram = {"trainable_params": sum(t.nbytes for t in ts if t.kind == PARAM and t.trainable),
            "param_grads": sum(t.nbytes for t in ts if t.kind == PARAM_GRAD),
            "optimizer_state": sum(t.nbytes for t in ts
                                   if t.kind == OPT_STATE and not is_fleet_state(t.name))}
    fleet = sum(t.nbytes for t in ts if t.kind == OPT_STATE and is_fleet_state(t.name))
    if fleet:  # --fleet-correction's b and mu (passes/fleet_correction.py)
        sram["fleet_correction"] = fleet
    n_received = len(received(g))
    if n_received:  # --receive: a pointer each, the table entry tt_received() returns and an
        # open receive's state (firmware/tt_checkpoint.c); the values stay in flash
        ptr = 4 if board.is_mcu else 8
        sram["received"] = n_received * ptr + (2 * ptr + 12) + RECEIVE_STATE
    if board.is_mcu:
        sram["link_buffers"] = link_buffer_bytes(g)
        sram["stack"] = board.stack_bytes
    return sram


def persistent(g: Graph) -> list[Tensor]:
    """Tensors with static storage, in a stable order: params, consts, grads, optimizer state."""
    order = {PARAM: 0, CONST: 1, PARAM_GRAD: 2, OPT_STATE: 3}
    ts = [t for t in g.tensors.values() if t.kind in order]
    return sorted(ts, key=lambda t: (order[t.kind], t.name))


# The training state besides the parameters, as the model's state table lists it: first the
# count of samples accumulated toward the next update (a scalar of model.c's own), then every
# static tensor tt_init() clears (gradient accumulators, momentum buffers, int8 shadows, the
# stochastic rounding's step counter). With the parameters it is everything a step reads.
PENDING = "pending_samples"


def training_state(g: Graph) -> list[Tensor]:
    """The static tensors of the training state, in table order (after PENDING)."""
    return [t for t in persistent(g) if t.kind in (PARAM_GRAD, OPT_STATE)]


@dataclass(frozen=True)
class StateEntry:
    """One entry of the model's state table (model.h NAME_state)."""
    name: str
    addr: str  # the C expression of its storage in model.c
    shape: tuple[int, ...]
    dtype: str  # IR dtype: f32, s8, s32, u8
    size: int  # elements
    nbytes: int


def state_table(g: Graph) -> list[StateEntry]:
    """The state table in order: model.c's pending-sample count, then training_state(g)."""
    return [StateEntry(PENDING, "&tt_pending", (1,), "s32", 1, 4)] + [
        StateEntry(t.name, c_symbol(t), tuple(t.shape), t.dtype, t.size, t.nbytes)
        for t in training_state(g)]
