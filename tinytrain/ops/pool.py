"""Shared window arithmetic of the 2-D pools (same geometry as conv2d, cin == cout)."""

from __future__ import annotations

import numpy as np

from tinytrain.ir import Node
from tinytrain.ops.base import Shape
from tinytrain.ops.conv2d import geom, geom_decl, out_hw


def pool_infer(node: Node, x: Shape) -> Shape:
    oh, ow = out_hw(x[0], x[1], node.attrs)
    return (oh, ow, x[2])


def windows(x_shape: Shape, node: Node):
    """Yield (oy, ox, rows, cols): in-bounds input indices of each output's window."""
    g = geom(node, x_shape, pool_infer(node, x_shape))
    for oy in range(g["oh"]):
        rows = [oy * g["sh"] - g["pt"] + ky * g["dh"] for ky in range(g["kh"])]
        rows = [r for r in rows if 0 <= r < g["h"]]
        for ox in range(g["ow"]):
            cols = [ox * g["sw"] - g["pl"] + kx * g["dw"] for kx in range(g["kw"])]
            yield oy, ox, rows, [c for c in cols if 0 <= c < g["w"]]


def pool_geom(cg, node: Node, x: Shape) -> str:
    return geom_decl(cg, node, x, pool_infer(node, x))


def empty_grad(x_shape: Shape) -> np.ndarray:
    return np.zeros(x_shape, np.float64)
