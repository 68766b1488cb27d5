"""Logical (ONNX, channel-first) versus stored (IR) axis order of an activation.

Every activation value of the source model is tracked as an Act: its logical per-sample shape
and `perm`, where IR axis i holds logical axis perm[i]. Image tensors are stored HWC
(perm (1, 2, 0) of logical CHW). A Transpose in the source only relabels `perm`; data moves only
when an op needs a particular order (Flatten/Reshape need storage order == logical order).
"""

from __future__ import annotations

from dataclasses import dataclass

HWC = (1, 2, 0)
SEQ = (1, 0)  # a sequence (C, L) stored (L, C): one step's channels together, as HWC


@dataclass(frozen=True)
class Act:
    name: str  # IR tensor name
    shape: tuple[int, ...]  # logical per-sample shape (batch axis dropped)
    perm: tuple[int, ...]  # IR axis i = logical axis perm[i]

    @property
    def ir_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[p] for p in self.perm)

    def is_plain(self) -> bool:
        """Storage order equals logical order (ignoring axes of size 1)."""
        order = [p for p in self.perm if self.shape[p] != 1]
        return order == sorted(order)


def identity(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def compose_transpose(act_perm: tuple[int, ...], onnx_perm: tuple[int, ...]) -> tuple[int, ...]:
    """New perm for the output of a Transpose with per-sample permutation `onnx_perm`.

    Output logical axis j is input logical axis onnx_perm[j]. We keep the same storage, so
    IR axis i (input logical act_perm[i]) is output logical axis inv(onnx_perm)[act_perm[i]].
    """
    inv = [0] * len(onnx_perm)
    for j, p in enumerate(onnx_perm):
        inv[p] = j
    return tuple(inv[p] for p in act_perm)
