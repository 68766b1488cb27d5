"""int8 2-D convolution (regular, grouped, depthwise) with TFLite's per-channel requantisation,
and its fp32 backward read straight from the int8 tensors.

attrs: the conv geometry of ops/conv2d.py plus in_offset (-x zero point), out_offset (y zero
point), act_min/act_max (fused activation, int8 domain), mult/shift (per output channel),
x_scale/x_zp, w_scale (per output channel). Gradients are float32 w.r.t. real values.
With attr `master` (--rounding master) the last input is the weight's shadow, and the forward
and the input gradient read the 16-bit master 256 w + s (see `master_acc`).
"""

from __future__ import annotations

import numpy as np

from tinytrain.errors import CompileError
from tinytrain.ir import CONST, PARAM
from tinytrain.ops.base import OpDef, c_float
from tinytrain.ops.conv2d import (
    _groups,
    _taps,
    backward_call,
    conv_backward_input,
    conv_backward_weight,
    geom,
    geom_decl,
    out_hw,
)
from tinytrain.quant.dw_pack import dw_pack
from tinytrain.quant.fixedpoint import mbqm, mbqm_double_rounding
from tinytrain.quant.update import master_real, master_values

INT32 = (-(2**31), 2**31 - 1)


def bias_input(node) -> str | None:
    """The bias input of a conv/dense node (x, w[, b][, shadow when attr master])."""
    n = len(node.inputs) - (1 if node.attrs.get("master") else 0)
    return node.inputs[2] if n > 2 else None


def shadow_input(node) -> str | None:
    return node.inputs[-1] if node.attrs.get("master") else None


def weight_values(node, xs: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """The weight a node's numpy forward multiplies by, and its scale in LSBs of w: the int8
    weight (1), or with attr master the master 256 w + s (256)."""
    if node.attrs.get("master"):
        return master_values(xs[1], xs[-1]), 256
    return xs[1].astype(np.int64), 1


def master_acc(acc: np.ndarray, unit: int) -> np.ndarray:
    """Accumulators over master weights (256 times the int8 ones, bias included) back to the
    int8 layer's units, rounding half up, saturated to int32 as the C does."""
    if unit == 1:
        return acc
    return np.clip((acc + unit // 2) >> 8, *INT32)


def real_weight(node, xs: list[np.ndarray]) -> np.ndarray:
    """The real-valued weight an input gradient reads: w (or the master w + s/256) * w_scale."""
    if node.attrs.get("master"):
        scale = np.asarray(node.attrs["w_scale"], np.float32)
        return (master_real(xs[1], xs[-1]) * scale.reshape((-1,) + (1,) * (xs[1].ndim - 1))
                ).astype(np.float32)
    return dequant_w(xs[1], node.attrs)


def clamp_range(a: dict) -> dict[str, int]:
    """lo/hi of the output's gradient mask: the fused activation's bounds (grad_lo/grad_hi,
    set by the importer), falling back to the clamp range."""
    return {"lo": a.get("grad_lo", a["act_min"]), "hi": a.get("grad_hi", a["act_max"])}


def requant_decl(cg, a: dict) -> str:
    """The static tt_q8_requant of a conv/dense node."""
    mult, shift = cg.ints(a["mult"]), cg.ints(a["shift"])
    return cg.static(f"static const tt_q8_requant {{name}} = {{{{{a['in_offset']}, "
                     f"{a['out_offset']}, {a['act_min']}, {a['act_max']}, {mult}, {shift}}}}};")


def floats(cg, values) -> str:
    body = ", ".join(c_float(v) for v in values)
    return cg.static(f"static const float {{name}}[{len(values)}] = {{{{{body}}}}};")


def requantize(acc: np.ndarray, a: dict, double_rounding: bool = False) -> np.ndarray:
    """int32 accumulators (channel-last) -> int8 outputs, as tt_mbqm + offset + clamp.

    LiteRT's reference CONV_2D and DEPTHWISE_CONV_2D round twice (gemmlowp's SRDHM then a
    rounding shift, tt_mbqm_double_rounding) while FULLY_CONNECTED rounds once: measured on
    one-op models, the other rounding is one LSB off near ties in each case."""
    f = mbqm_double_rounding if double_rounding else mbqm
    y = f(acc, np.asarray(a["mult"]), np.asarray(a["shift"])) + a["out_offset"]
    return np.clip(y, a["act_min"], a["act_max"]).astype(np.int8)


def conv_acc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, a: dict, g: dict) -> np.ndarray:
    """Exact int64 accumulators: sum (x + in_offset) * w over in-bounds taps, plus bias."""
    xo = x.astype(np.int64) + a["in_offset"]  # padding taps then read 0 = (zp - zp)
    acc = np.zeros((g["oh"], g["ow"], g["cout"]), np.int64)
    for ky, kx, xp, sl in _taps(xo, g):
        patch = xp[sl]
        for ic, oc in _groups(g):
            acc[..., oc] += patch[..., ic] @ w[oc, ky, kx, :].astype(np.int64).T
    if b is not None:
        acc += b.astype(np.int64)
    return acc


def dequant_w(w: np.ndarray, a: dict) -> np.ndarray:
    scale = np.asarray(a["w_scale"], np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
    return (w.astype(np.float32) * scale).astype(np.float32)


def dequant_x(x: np.ndarray, a: dict) -> np.ndarray:
    return ((x.astype(np.int32) - a["x_zp"]).astype(np.float32) * np.float32(a["x_scale"]))


DW_LINE = 256  # TT_DW_LINE in tt_kernels.h: floats of the in-place depthwise backward's ring
MAX_KH = 64  # TT_MAX_KH in tt_kernels.h: the row kernel keeps one pointer per kernel row


def kernel_variant(cg, g: dict[str, int]) -> str:
    """Suffix of the int8 forward kernel for this geometry: an optimised kernel of
    runtime_c/optimized/tt_kernels_opt.h when the build uses them and the geometry is one it handles
    (pointwise, depthwise, or any groups == 1 conv) unless the build keeps that family
    generic to fit the board's flash, else the reference kernel."""
    if not cg.optimized:
        return ""
    pointwise = (g["kh"] == g["kw"] == g["sh"] == g["sw"] == g["dh"] == g["dw"] == 1
                 and g["pt"] == g["pl"] == 0 and (g["oh"], g["ow"]) == (g["h"], g["w"]))
    v = ""
    if g["groups"] == 1:
        v = "_pw" if pointwise else "_reg"
    elif g["groups"] == g["cin"] == g["cout"] and g["dh"] == g["dw"] == 1:
        v = "_dw"
    return v if v and cg.uses_opt(f"tt_conv2d_s8{v}") else ""


def dw_pack_arg(cg, node, variant: str) -> str:
    """`, pack` for a depthwise conv whose weights and bias are frozen (flash constants): the
    kernel's per-call constants made once (quant/dw_pack.py), which spares a row-streamed
    layer their derivation on every output row; "" otherwise."""
    if variant != "_dw":
        return ""
    ts = [cg.g.tensors[n] for n in (node.inputs[1], bias_input(node)) if n]
    if any(t.kind not in (PARAM, CONST) or t.trainable or t.data is None for t in ts):
        return ""
    words = dw_pack(ts[0].data, ts[1].data if len(ts) > 1 else None, node.attrs)
    if not words:
        return ""
    n = len(cg.decls)
    table = cg.ints(words)  # a row-streamed layer asks once per row: one table
    cg.uses_opt("tt_conv2d_s8_dw", table_bytes=4 * len(words) if len(cg.decls) > n else 0)
    return f", {table}"


def _check_kernel_height(node) -> None:
    if node.attrs["kernel"][0] > MAX_KH:
        raise CompileError(f"node {node.name}: int8 conv kernels up to {MAX_KH} rows tall are "
                           f"supported, this one has {node.attrs['kernel'][0]}")


class Conv2dQ8(OpDef):
    name = "conv2d_q8"
    public = True
    source_ops = ("CONV_2D (int8)", "DEPTHWISE_CONV_2D (int8)", "QLinearConv/QDQ Conv")

    def infer(self, node, shapes):
        x, w = shapes[0], shapes[1]
        oh, ow = out_hw(x[0], x[1], node.attrs)
        return [(oh, ow, w[0])]

    def forward(self, node, xs):
        x = xs[0]
        w, unit = weight_values(node, xs)
        b = xs[2].astype(np.int64) * unit if bias_input(node) else None
        g = geom(node, x.shape, self.infer(node, [x.shape, w.shape])[0])
        acc = master_acc(conv_acc(x, w, b, node.attrs, g), unit)
        return [requantize(acc, node.attrs, double_rounding=True)]

    def gradient(self, node, gb):
        x, w = node.inputs[0], node.inputs[1]
        dy = gb.grad(node.outputs[0])
        if dy is None:
            return
        a = dict(node.attrs)
        dy = gb.emit("q8_clamp_backward", [dy, node.outputs[0]], clamp_range(a))
        if gb.needs_grad(x):
            gb.contribute(x, gb.emit("conv2d_backward_input_q8", [dy, w], a,
                                     out_shape=gb.shape(x)))
        if gb.needs_grad(w):
            gb.accumulate_param(w, "conv2d_backward_weight_q8", [dy, x], a)
        b = bias_input(node)
        if b is not None and gb.needs_grad(b):
            gb.accumulate_param(b, "bias_backward", [dy])

    def c_call(self, node, cg):
        x, y = cg.shape(node.inputs[0]), cg.shape(node.outputs[0])
        b = bias_input(node)
        b = cg.ptr(b) if b else "NULL"
        _check_kernel_height(node)
        gd, rq = geom_decl(cg, node, x, y), requant_decl(cg, node.attrs)
        sh = shadow_input(node)
        if sh:  # the master's kernel (tt_q8_master.c; pointwise: tt_q8_conv_opt.c)
            return (f"{cg.kernel('tt_conv2d_s8_master')}({cg.ptr(node.outputs[0])}, "
                    f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {cg.ptr(sh)}, {b}, "
                    f"&{gd}, &{rq});")
        k = kernel_variant(cg, geom(node, x, y))
        pack = dw_pack_arg(cg, node, k)
        return (f"tt_conv2d_s8{k}{'_pk' if pack else ''}({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {b}, &{gd}, &{rq}{pack});")

    def row_inputs(self, node, shapes):
        if node.attrs.get("master"):
            return None  # no row kernel reads a master: the layer runs whole
        return (0,) if len(shapes[0]) == 3 else None

    def row_window(self, node, shapes, row):
        a = node.attrs
        lo = row * a["stride"][0] - a["pads"][0]
        hi = lo + (a["kernel"][0] - 1) * a["dilation"][0]
        return [(max(lo, 0), min(hi, shapes[0][0] - 1))]

    def row_call(self, node, cg, rings, out, row):
        x, y = cg.shape(node.inputs[0]), cg.shape(node.outputs[0])
        b = bias_input(node)
        b = cg.ptr(b) if b else "NULL"
        _check_kernel_height(node)
        k = kernel_variant(cg, geom(node, x, y))
        pack = dw_pack_arg(cg, node, k)
        return (f"tt_conv2d_s8{k}{'_pk' if pack else ''}_row(&{out}, &{rings[0]}, {row}, "
                f"{cg.ptr(node.inputs[1])}, {b}, &{geom_decl(cg, node, x, y)}, "
                f"&{requant_decl(cg, node.attrs)}{pack});")

    def macs(self, node, shapes, out_shapes):
        w = shapes[1]
        oh, ow, cout = out_shapes[0]
        return oh * ow * cout * w[1] * w[2] * w[3]


def _row_geometry(node, dy, w) -> str | None:
    """'pointwise' (1x1, stride 1, no padding, one group) or 'depthwise' (one filter per
    channel) when the input gradient can be made row by row; else None."""
    a = node.attrs
    if len(dy) != 3:
        return None
    if (tuple(a["kernel"]) == (1, 1) and tuple(a["stride"]) == (1, 1) and a.get("groups", 1) == 1
            and not any(a["pads"])):
        return "pointwise"
    if a.get("groups", 1) == dy[2] > 1 and w[0] == dy[2] and w[-1] == 1:
        return "depthwise"
    return None


class Conv2dBackwardInputQ8(OpDef):
    name = "conv2d_backward_input_q8"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        x_shape = tuple(node.attrs["out_shape"])
        return [conv_backward_input(xs[0], real_weight(node, xs),
                                    geom(node, x_shape, xs[0].shape))]

    def in_place(self, node, shapes):
        """Depthwise, stride 1, dx the shape of dy: a ring of pb + 1 rows of one channel
        (TT_DW_LINE floats) holds the dy values still to be read."""
        a = node.attrs
        if a.get("master"):
            return False
        dy, x = shapes[0], tuple(a["out_shape"])
        pb = (a["kernel"][0] - 1) * a["dilation"][0] - a["pads"][0]
        return (tuple(dy) == x and a.get("groups", 1) == x[2] and tuple(a["stride"]) == (1, 1)
                and pb >= 0 and (pb + 1) * x[1] <= DW_LINE)

    def c_call(self, node, cg):
        g = geom_decl(cg, node, cg.shape(node.outputs[0]), cg.shape(node.inputs[0]))
        sh = shadow_input(node)
        if sh:
            return (f"tt_conv2d_backward_input_s8_master({cg.ptr(node.outputs[0])}, "
                    f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, {cg.ptr(sh)}, "
                    f"{floats(cg, node.attrs['w_scale'])}, &{g});")
        if cg.same_buffer(node.outputs[0], node.inputs[0]):
            return (f"tt_dw_backward_input_inplace_s8({cg.ptr(node.outputs[0])}, "
                    f"{cg.ptr(node.inputs[1])}, {floats(cg, node.attrs['w_scale'])}, &{g});")
        return (f"tt_conv2d_backward_input_s8({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, "
                f"{floats(cg, node.attrs['w_scale'])}, &{g});")

    # In a backward region run row by row (passes/stream_backward.py): a 1x1 conv's input
    # gradient row r needs dy's row r; a depthwise one the dy rows whose taps reach row r.
    def row_inputs(self, node, shapes):
        if node.attrs.get("master"):
            return None
        return (0,) if _row_geometry(node, shapes[0], shapes[1]) else None

    def row_window(self, node, shapes, row):
        a = node.attrs
        if _row_geometry(node, shapes[0], shapes[1]) == "pointwise":
            return [(row, row)]
        sh, pt, reach = a["stride"][0], a["pads"][0], (a["kernel"][0] - 1) * a["dilation"][0]
        lo, hi = -(-(row + pt - reach) // sh), (row + pt) // sh
        return [(max(lo, 0), min(hi, shapes[0][0] - 1))]

    def row_call(self, node, cg, rings, out, row):
        dy, dx = cg.shape(node.inputs[0]), cg.shape(node.outputs[0])
        ws, w = floats(cg, node.attrs["w_scale"]), cg.ptr(node.inputs[1])
        y = f"(float *)tt_row(&{out}, {row})"
        if _row_geometry(node, dy, cg.shape(node.inputs[1])) == "pointwise":
            g = geom_decl(cg, node, (1, *dx[1:]), (1, *dy[1:]))  # one row: the same sums
            return (f"tt_conv2d_backward_input_s8({y}, (const float *)tt_row(&{rings[0]}, "
                    f"{row}), {w}, {ws}, &{g});")
        g = geom_decl(cg, node, dx, dy)
        return f"tt_dw_backward_input_s8_row({y}, &{rings[0]}, {row}, {w}, {ws}, &{g});"

    def macs(self, node, shapes, out_shapes):
        w = shapes[1]
        oh, ow, cout = shapes[0]
        return oh * ow * cout * w[1] * w[2] * w[3]


class Conv2dBackwardWeightQ8(OpDef):
    name = "conv2d_backward_weight_q8"

    def infer(self, node, shapes):
        return [tuple(node.attrs["out_shape"])]

    def forward(self, node, xs):
        dy, x = xs
        return [conv_backward_weight(dy, dequant_x(x, node.attrs), geom(node, x.shape, dy.shape))]

    def c_call(self, node, cg):
        a = node.attrs
        g = geom_decl(cg, node, cg.shape(node.inputs[1]), cg.shape(node.inputs[0]))
        return (f"tt_conv2d_backward_weight_s8({cg.ptr(node.outputs[0])}, "
                f"{cg.ptr(node.inputs[0])}, {cg.ptr(node.inputs[1])}, "
                f"{c_float(a['x_scale'])}, {a['x_zp']}, &{g});")

    def macs(self, node, shapes, out_shapes):
        oh, ow, cout = shapes[0]
        w = out_shapes[0]
        return oh * ow * cout * w[1] * w[2] * w[3]


OPS = (Conv2dQ8(), Conv2dBackwardInputQ8(), Conv2dBackwardWeightQ8())

__all__ = ["OPS", "backward_call", "bias_input", "dequant_w", "dequant_x", "floats",
           "master_acc", "real_weight", "requant_decl", "requantize", "shadow_input",
           "weight_values"]
