"""What a build trains, element by element: the tensors a device sends to the fleet.

A build's program.json lists its trainable tensors (whole shapes, as the link's params()
returns them) and, for a partial update, the channels it trains (`partial_channels`, along
`partial_axis` or the last, input-channel axis). A device sends only those elements: a
weight trained on 8 of its 96 input channels costs 8/96 of the weight on the wire, and the
server knows which elements each reply speaks for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tinytrain.errors import DataError

INT_RANGES = {"s8": (-128, 127), "s32": (-(2**31), 2**31 - 1)}
NP_DTYPES = {"f32": np.float32, "s8": np.int8, "s32": np.int32}


@dataclass(frozen=True)
class Trained:
    """One trainable tensor of a build: whole shape, dtype, per-channel scale (int tensors),
    the channels a partial update trains (None: every element) and the build's other
    trainable tensors that feed its layer (program.json's `upstream`; None from an older
    build): the fleet averages a tensor over the devices that train the same of those
    (fleet/shares.py)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: tuple[float, ...] | None = None
    channels: tuple[int, ...] | None = None
    axis: int = -1
    upstream: tuple[str, ...] | None = None

    def renamed(self, name: str) -> Trained:
        return replace(self, name=name)

    def take(self, whole: np.ndarray) -> np.ndarray:
        """The trained elements of the whole tensor (a copy, in the tensor's dtype)."""
        return self.part(np.asarray(whole, NP_DTYPES[self.dtype]))

    def part(self, whole: np.ndarray) -> np.ndarray:
        """The trained elements of a whole tensor of any dtype (a copy): a float control
        variate stays float."""
        a = np.asarray(whole).reshape(self.shape)
        return a.copy() if self.channels is None else np.take(a, self.channels, self.axis)

    def widen(self, a: np.ndarray, current: np.ndarray) -> np.ndarray:
        """`a`, a whole tensor or its trained elements (what a fleet whose copies are
        matched sends, fleet/shares.py), as the whole tensor: the part put into `current`."""
        a = np.asarray(a)
        n_part = int(np.prod(self.part_shape()))
        if self.channels is None or a.size != n_part or n_part == int(np.prod(self.shape)):
            return a
        return self.put(current, a.reshape(self.part_shape())).astype(a.dtype)

    def put(self, whole: np.ndarray, part: np.ndarray) -> np.ndarray:
        """`whole` (float64) with the trained elements replaced by `part`."""
        out = np.array(whole, np.float64).reshape(self.shape)
        if self.channels is None:
            out[...] = part
        else:
            idx = [slice(None)] * len(self.shape)
            idx[self.axis] = list(self.channels)
            out[tuple(idx)] = part
        return out

    def mask(self) -> np.ndarray:
        """True where this build trains the element."""
        return self.put(np.zeros(self.shape), 1.0).astype(bool)

    def part_shape(self) -> tuple[int, ...]:
        if self.channels is None:
            return self.shape
        s = list(self.shape)
        s[self.axis] = len(self.channels)
        return tuple(s)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "scale": None if self.scale is None else list(self.scale),
                "channels": None if self.channels is None else list(self.channels),
                "axis": self.axis,
                "upstream": None if self.upstream is None else list(self.upstream)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Trained:
        return Trained(d["name"], tuple(d["shape"]), d["dtype"],
                       None if d.get("scale") is None else tuple(d["scale"]),
                       None if d.get("channels") is None else tuple(d["channels"]),
                       int(d.get("axis", -1)),
                       None if d.get("upstream") is None else tuple(d["upstream"]))


def trained_tensors(info: dict[str, Any]) -> list[Trained]:
    """The trainable tensors of the build described by `info` (its program.json)."""
    partial = info.get("partial_channels") or {}
    axes = info.get("partial_axis") or {}
    out = []
    for p in info["trainable"]:
        ch = partial.get(p["name"])
        out.append(Trained(p["name"], tuple(p["shape"]), p.get("dtype", "f32"),
                           None if p.get("scale") is None else tuple(p["scale"]),
                           None if ch is None else tuple(int(c) for c in ch),
                           int(axes.get(p["name"], -1)),
                           None if p.get("upstream") is None else tuple(p["upstream"])))
    return out


def received_tensors(info: dict[str, Any]) -> list[Trained]:
    """The tensors the build described by `info` can be sent (built with --receive: frozen,
    replaced whole over the link); [] for other builds."""
    return [Trained(p["name"], tuple(p["shape"]), p.get("dtype", "f32"),
                    None if p.get("scale") is None else tuple(p["scale"]))
            for p in info.get("received") or []]


def dumps(plan: list[Trained]) -> str:
    return json.dumps([t.to_json() for t in plan], separators=(",", ":"))


def loads(text: str) -> list[Trained]:
    try:
        return [Trained.from_json(d) for d in json.loads(text)]
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"a device's description of what it trains is malformed ({e})") from e
