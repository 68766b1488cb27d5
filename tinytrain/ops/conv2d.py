"""2-D convolution: regular, grouped, depthwise and pointwise (NHWC, weights OHWI)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tinytrain.ir import Node
from tinytrain.ops.base import OpDef, Shape

# attrs: stride (sh, sw), pads (top, left, bottom, right), dilation (dh, dw), groups


# the largest kernel extent or padding accepted: beyond any real model, inside int32 in C
MAX_EXTENT = 1 << 16


def out_hw(h: int, w: int, a: dict) -> tuple[int, int]:
    sh, sw = a["stride"]
    pt, pl, pb, pr = a["pads"]
    dh, dw = a["dilation"]
    kh, kw = a["kernel"]
    for what, vals, lo in (("strides", (sh, sw), 1), ("dilations", (dh, dw), 1),
                           ("kernel sizes", (kh, kw), 1), ("pads", (pt, pl, pb, pr), 0)):
        if any(not lo <= int(v) <= MAX_EXTENT for v in vals):
            raise ValueError(f"{what} {list(vals)} must lie in [{lo}, {MAX_EXTENT}]")
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // sw + 1
    return oh, ow


def geom(node: Node, x: Shape, y: Shape) -> dict[str, int]:
    a = node.attrs
    return dict(h=x[0], w=x[1], cin=x[2], oh=y[0], ow=y[1], cout=y[2], kh=a["kernel"][0],
                kw=a["kernel"][1], sh=a["stride"][0], sw=a["stride"][1], pt=a["pads"][0],
                pl=a["pads"][1], dh=a["dilation"][0], dw=a["dilation"][1],
                groups=a.get("groups", 1))


def _taps(x: np.ndarray, g: dict[str, int]):
    """Yield (ky, kx, patch) with patch[oy, ox, :] = padded x at the tap's position."""
    need_h = (g["oh"] - 1) * g["sh"] + (g["kh"] - 1) * g["dh"] + 1
    need_w = (g["ow"] - 1) * g["sw"] + (g["kw"] - 1) * g["dw"] + 1
    xp = np.zeros((max(need_h, g["h"] + g["pt"]), max(need_w, g["w"] + g["pl"]), x.shape[2]),
                  x.dtype)
    xp[g["pt"]:g["pt"] + g["h"], g["pl"]:g["pl"] + g["w"]] = x
    for ky in range(g["kh"]):
        for kx in range(g["kw"]):
            y0, x0 = ky * g["dh"], kx * g["dw"]
            sl = (slice(y0, y0 + (g["oh"] - 1) * g["sh"] + 1, g["sh"]),
                  slice(x0, x0 + (g["ow"] - 1) * g["sw"] + 1, g["sw"]))
            yield ky, kx, xp, sl


def _groups(g: dict):
    """Yield (input channel slice, output channel slice) of each conv group."""
    cin_g, cout_g = g["cin"] // g["groups"], g["cout"] // g["groups"]
    for grp in range(g["groups"]):
        yield slice(grp * cin_g, (grp + 1) * cin_g), slice(grp * cout_g, (grp + 1) * cout_g)


def conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, g: dict) -> np.ndarray:
    y = np.zeros((g["oh"], g["ow"], g["cout"]), np.float64)
    for ky, kx, xp, sl in _taps(x.astype(np.float64), g):
        patch = xp[sl]
        for ic, oc in _groups(g):
            y[..., oc] += patch[..., ic] @ w[oc, ky, kx, :].astype(np.float64).T
    if b is not None:
        y += b
    return y.astype(np.float32)


def conv_backward_input(dy: np.ndarray, w: np.ndarray, g: dict) -> np.ndarray:
    dxp = None
    for ky, kx, xp, sl in _taps(np.zeros((g["h"], g["w"], g["cin"])), g):
        if dxp is None:
            dxp = np.zeros_like(xp)
        for ic, oc in _groups(g):
            dxp[sl][..., ic] += dy[..., oc].astype(np.float64) @ w[oc, ky, kx, :]
    assert dxp is not None
    return dxp[g["pt"]:g["pt"] + g["h"], g["pl"]:g["pl"] + g["w"]].astype(np.float32)


def conv_backward_weight(dy: np.ndarray, x: np.ndarray, g: dict) -> np.ndarray:
    dw = np.zeros((g["cout"], g["kh"], g["kw"], g["cin"] // g["groups"]))
    for ky, kx, xp, sl in _taps(x.astype(np.float64), g):
        patch = xp[sl]
        for ic, oc in _groups(g):
            dw[oc, ky, kx, :] += np.einsum("hwo,hwi->oi", dy[..., oc], patch[..., ic])
    return dw.astype(np.float32)


def geom_decl(cg, node: Node, x: Shape, y: Shape) -> str:
    g = geom(node, x, y)
    body = ", ".join(str(g[k]) for k in ("h", "w", "cin", "oh", "ow", "cout", "kh", "kw", "sh",
                                         "sw", "pt", "pl", "dh", "dw", "groups"))
    return cg.static(f"static const tt_conv_geom {{name}} = {{{{{body}}}}};")


def backward_call(kernel: str, node: Node, cg, x: Shape, y: Shape) -> str:
    """`kernel(out, in0, in1, &geometry)`, the shape of both conv backward calls."""
    return (f"{cg.kernel(kernel)}({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
            f"{cg.ptr(node.inputs[1])}, &{geom_decl(cg, node, x, y)});")


class Conv2d(OpDef):
    name = "conv2d"
    public = True
    source_ops = ("Conv", "CONV_2D", "DEPTHWISE_CONV_2D", "BatchNormalization")

    def infer(self, node, shapes):
        x, w = shapes[0], shapes[1]
        oh, ow = out_hw(x[0], x[1], node.attrs)
        return [(oh, ow, w[0])]

    def forward(self, node, xs):
        x, w = xs[0], xs[1]
        b = xs[2] if len(xs) > 2 else None
        return [conv_forward(x, w, b, geom(node, x.shape, self.infer(node, [x.shape, w.shape])[0]))]

    def gradient(self, node, gb):
        x, w = node.inputs[0], node.inputs[1]
        dy = gb.grad(node.outputs[0])
        if dy is None:
            return
        if gb.needs_grad(x):
            gb.contribute(x, gb.emit("conv2d_backward_input", [dy, w], dict(node.attrs),
                                     out_shape=gb.shape(x)))
        if gb.needs_grad(w):
            gb.accumulate_param(w, "conv2d_backward_weight", [dy, x], dict(node.attrs))
        if len(node.inputs) > 2 and gb.needs_grad(node.inputs[2]):
            gb.accumulate_param(node.inputs[2], "bias_backward", [dy])

    def c_call(self, node, cg):
        x, y = cg.shape(node.inputs[0]), cg.shape(node.outputs[0])
        b = cg.ptr(node.inputs[2]) if len(node.inputs) > 2 else "NULL"
        return (f"{cg.kernel('tt_conv2d_f32')}({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {b}, "
                f"&{geom_decl(cg, node, x, y)});")

    def macs(self, node, shapes, out_shapes):
        w = shapes[1]
        oh, ow, cout = out_shapes[0]
        return oh * ow * cout * w[1] * w[2] * w[3]


class Conv2dBackwardInput(OpDef):
    name = "conv2d_backward_input"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy, w = xs
        x_shape = tuple(node.attrs["out_shape"])
        return [conv_backward_input(dy, w, geom(node, x_shape, dy.shape))]

    def c_call(self, node, cg):
        return backward_call("tt_conv2d_backward_input_f32", node, cg,
                             cg.shape(node.outputs[0]), cg.shape(node.inputs[0]))

    def macs(self, node, shapes, out_shapes):
        w = shapes[1]
        oh, ow, cout = shapes[0]
        return oh * ow * cout * w[1] * w[2] * w[3]


class Conv2dBackwardWeight(OpDef):
    name = "conv2d_backward_weight"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy, x = xs
        return [conv_backward_weight(dy, x, geom(node, x.shape, dy.shape))]

    def c_call(self, node, cg):
        return backward_call("tt_conv2d_backward_weight_f32", node, cg,
                             cg.shape(node.inputs[1]), cg.shape(node.inputs[0]))

    def macs(self, node, shapes, out_shapes):
        oh, ow, cout = shapes[0]
        w = out_shapes[0]
        return oh * ow * cout * w[1] * w[2] * w[3]


class BiasBackward(OpDef):
    name = "bias_backward"

    def infer(self, node, shapes):
        return [(shapes[0][-1],)]

    def forward(self, node, xs):
        dy = xs[0]
        return [dy.reshape(-1, dy.shape[-1]).sum(axis=0)]

    def c_call(self, node, cg):
        s = cg.shape(node.inputs[0])
        rows = int(np.prod(s[:-1])) if len(s) > 1 else 1
        return (f"tt_bias_backward_f32({cg.ptr(node.outputs[0])}, {cg.ptr(node.inputs[0])}, "
                f"{rows}, {s[-1]});")


OPS: Sequence[OpDef] = (Conv2d(), Conv2dBackwardInput(), Conv2dBackwardWeight(), BiasBackward())
