"""Post-training static quantisation of an fp32 graph to the int8 IR (`--quantize int8`).

Weights: symmetric per output channel; biases: int32 at s_x * s_w; activations: asymmetric
per tensor from the calibration range (min/max over the calibration samples). A ReLU/ReLU6/
clip that directly follows a conv, dense or add is fused into it, as TFLite converters do, so
its output range is the clip's. The result uses exactly the ops and constants the TFLite
importer produces, so it runs on the same bit-exact kernels.

Recurrent layers stay fp32 (mixed precision): an LSTM's or GRU's recurrence, the 1x1 conv
that projects its input, and the reshapes and step slices of its outputs keep their float
kernels, with a DEQUANTIZE where an int8 tensor enters them and a QUANTIZE (at the calibrated
range) where an int8 op reads their result. Quantising the gate pre-activations and the cell
state to 8 bits would cost the recurrence its accuracy (TFLite's own integer LSTM needs 16-bit
cell states for it), and the recurrence's memory is its float trace either way.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tinytrain.errors import ModelError
from tinytrain.ir import ACTIVATION, INPUT, PARAM, Graph, Node, QuantParams, Tensor
from tinytrain.ops import interp
from tinytrain.quant.fixedpoint import activation_range
from tinytrain.quant.params import (
    affine_from_range,
    grad_range,
    requant,
    symmetric_per_channel,
)

Ranges = dict[str, tuple[float, float]]
# QDQ weights fold to scale * q in float32, so dividing by the scale lands within float32
# rounding of an integer; anything further off was changed after quantisation (e.g. BN)
QDQ_GRID_TOL = 1e-3
# ORT's bias scale is s_x * s_w in float32, as ours; allow float rounding of the product only
QDQ_BIAS_SCALE_RTOL = 1e-6
SUPPORTED = ("conv2d", "dense", "clip (fused after conv/dense/add)", "add", "mul",
             "global_avg_pool", "avg_pool2d", "max_pool2d", "pad", "reshape", "concat",
             "hard_swish", "sigmoid", "hard_sigmoid", "lstm and gru (kept fp32)")
RECURRENT = ("lstm", "gru")


FLOAT32_MAX = float(np.finfo(np.float32).max)


def calibrate(g: Graph, samples: Iterable[np.ndarray]) -> Ranges:
    """min/max of every forward tensor over the samples (numpy reference forward)."""
    ranges: Ranges = {}
    base = interp.initial_state(g)
    for x in samples:
        env = dict(base)
        interp.run(g, env, {g.inputs[0]: np.asarray(x, np.float32).reshape(g.t(g.inputs[0])
                                                                            .shape)},
                   phases=("forward",))
        for name, t in g.tensors.items():
            if t.kind in (INPUT, ACTIVATION) and name in env:
                v = env[name]
                lo, hi = float(v.min()), float(v.max())
                old = ranges.get(name, (lo, hi))
                ranges[name] = (min(old[0], lo), max(old[1], hi))
    if not ranges:
        raise ModelError("calibration data has no samples")
    return ranges


def _act_name(lo: float, hi: float) -> str | None:
    if lo == 0.0 and hi == float("inf"):
        return "RELU"
    if lo == 0.0 and hi == 6.0:
        return "RELU6"
    if lo == -1.0 and hi == 1.0:
        return "RELU_N1_TO_1"
    return None


class _Q:
    def __init__(self, g: Graph, ranges: Ranges, fixed: dict | None = None) -> None:
        self.g, self.ranges = g, ranges
        self.fixed = fixed  # meta["qdq"] of an ONNX QDQ model (frontend/onnx_qdq.py)
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.consumers = g.consumers()
        self.fused: set[str] = set()  # clip nodes folded into their producer
        self.alias: dict[str, str] = {}  # f32 tensor -> int8 tensor carrying it
        self.current: Node | None = None  # the node being quantised

    def quant_of(self, name: str) -> QuantParams:
        if self.fixed is not None:
            rec = self.fixed.get(name)
            if not isinstance(rec, list):
                raise ModelError(f"the QDQ model has no QuantizeLinear/DequantizeLinear pair "
                                 f"for tensor {name}; tinytrain needs every int8 activation's "
                                 "scale and zero point from the file")
            return QuantParams((float(rec[0]),), (int(rec[1]),))
        if name not in self.ranges:
            raise ModelError(f"no calibration range for tensor {name}")
        lo, hi = self.ranges[name]
        s, zp = affine_from_range(lo, hi) if np.isfinite([lo, hi]).all() else (np.inf, 0)
        if not 0.0 < s < FLOAT32_MAX:
            raise ModelError(f"tensor '{name}' reaches {max(abs(lo), abs(hi)):.3g} on the "
                             "calibration data: beyond what an int8 scale can hold in float32 "
                             "(the model's weights or inputs are too large; check that it was "
                             "trained and that the data is scaled as in training)")
        return QuantParams((s,), (zp,))

    def q(self, name: str) -> str:
        """The int8 tensor carrying `name`; a float one (a recurrent layer's) is quantised at
        its calibrated range first, once."""
        name = self.alias.get(name, name)
        t = self.tensors.get(name)
        if t is None or t.dtype != "f32":
            return name
        from tinytrain.ops import quantize_q8

        qname = f"{name}_q8"
        if qname not in self.tensors:
            qp = self.quant_of(name)
            self.tensors[qname] = Tensor(qname, t.shape, ACTIVATION, dtype="s8", quant=qp)
            self.nodes.append(Node(f"{name}_quantize", "quantize_q8", (name,), (qname,),
                                   quantize_q8.prepare(None, qp)))
        self.alias[name] = qname
        return qname

    def real(self, name: str) -> str:
        """The float tensor carrying `name`: an int8 one is dequantised first, once."""
        name = self.alias.get(name, name)
        t = self.tensors[name]
        if t.dtype == "f32" or t.quant is None:
            return name
        fname = f"{name}_f32"
        if fname not in self.tensors:
            self.tensors[fname] = Tensor(fname, t.shape, ACTIVATION)
            self.nodes.append(Node(f"{name}_dequantize", "dequantize_q8", (name,), (fname,),
                                   {"scale": t.quant.scale[0], "zp": t.quant.zero_point[0]}))
        return fname

    def float_nodes(self) -> set[str]:
        """The nodes that stay fp32: each recurrence, the conv projecting its input, and the
        reshapes and step slices that only move a float result on."""
        keep: set[str] = set()
        producers = self.g.producers()
        for n in self.g.nodes:
            if n.op in RECURRENT:
                keep.add(n.name)
                p = producers.get(n.inputs[0])
                if p is not None and p.op == "conv2d":
                    keep.add(p.name)
        floats = {o for n in self.g.nodes if n.name in keep for o in n.outputs}
        for n in self.g.nodes:  # forward order: a chain of moves stays float
            if n.op in ("reshape", "seq_step") and n.inputs[0] in floats:
                keep.add(n.name)
                floats.update(n.outputs)
        return keep

    def keep_float(self, n: Node) -> None:
        """A node of the fp32 island: its activation inputs as floats, its outputs fp32."""
        inputs = tuple(self.real(i) if self.g.t(i).kind in (ACTIVATION, INPUT) else i
                       for i in n.inputs)
        for o in n.outputs:
            self.tensors[o] = self.g.t(o)
        alias = n.op == "reshape" and self.tensors[inputs[0]].dtype == "f32"
        if alias:  # a free view of its input, as before
            self.tensors[n.outputs[0]] = self.g.t(n.outputs[0]).replace(alias_of=inputs[0])
        self.nodes.append(n if inputs == n.inputs else
                          Node(n.name, n.op, inputs, n.outputs, n.attrs, n.phase))

    def out(self, name: str, quant: QuantParams, alias_of: str | None = None) -> str:
        t = self.g.t(name)
        self.tensors[name] = Tensor(name, t.shape, ACTIVATION, dtype="s8", quant=quant,
                                    alias_of=alias_of)
        return name

    def fusable_clip(self, n: Node) -> Node | None:
        cs = self.consumers.get(n.outputs[0], [])
        if len(cs) == 1 and cs[0].op == "clip" and n.outputs[0] not in self.g.outputs:
            return cs[0]
        return None

    def activation(self, n: Node) -> tuple[str, str, tuple[int, int], QuantParams]:
        """(output tensor, activation name, int8 clamp, output quant) with clip fusion."""
        clip = self.fusable_clip(n)
        if clip is None:
            y = n.outputs[0]
            qp = self.quant_of(y)
            # onnxruntime drops a Relu/Clip after a conv/gemm/add and lets int8 saturation
            # clamp: a range starting at exactly 0 is that ReLU, so mask its gradient there
            relu = self.fixed is not None and qp.zero_point[0] == -128 and y not in self.g.outputs
            return y, "RELU" if relu else "NONE", (-128, 127), qp
        self.fused.add(clip.name)
        y = clip.outputs[0]
        lo, hi = clip.attrs["lo"], clip.attrs["hi"]
        qp = self.quant_of(y)
        act = _act_name(lo, hi)
        s, zp = qp.scale[0], qp.zero_point[0]
        if act is not None:
            rng = activation_range(act, s, zp)
        else:  # a general clip: clamp at its bounds in the int8 domain
            def qv(v: float) -> int:
                return int(np.clip(zp + np.round(v / s), -128, 127)) if np.isfinite(v) else \
                    (127 if v > 0 else -128)
            rng = (qv(lo), qv(hi))
            act = "RELU6" if lo > -np.inf and hi < np.inf else "RELU"
        self.alias[n.outputs[0]] = y
        return y, act, rng, qp

    def layer(self, n: Node) -> None:
        x = self.q(n.inputs[0])
        xq = self.tensors[x].quant
        assert xq is not None
        w = self.g.t(n.inputs[1])
        wq, ws = self.fixed_weights(n, w) if self.fixed_param(w.name) else \
            symmetric_per_channel(np.asarray(w.data, np.float32))
        self.tensors[w.name] = w.replace(dtype="s8", data=wq,
                                         quant=QuantParams(ws, (0,) * len(ws), 0))
        inputs = [x, w.name]
        if len(n.inputs) > 2:
            b = self.g.t(n.inputs[2])
            with np.errstate(over="ignore"):  # an overflow is reported below
                bs = tuple(float(np.float32(xq.scale[0]) * np.float32(s)) for s in ws)
            if not np.isfinite(bs).all():
                raise ModelError(f"node '{n.name}': the int8 scale of bias '{b.name}' (input "
                                 "scale x weight scale) overflows float32: weights of up to "
                                 f"{float(np.abs(w.data).max()):.3g} on inputs of scale "
                                 f"{xq.scale[0]:.3g} are too large to quantise")
            if self.fixed_param(b.name):
                bq = self.fixed_bias(n, b.name, bs)
            else:
                bq = np.clip(np.round(np.asarray(b.data, np.float64) / np.asarray(bs)),
                             -(2**31), 2**31 - 1).astype(np.int32)
            self.tensors[b.name] = b.replace(dtype="s32", data=bq,
                                             quant=QuantParams(bs, (0,) * len(bs), 0))
            inputs.append(b.name)
        y, act, rng, yq = self.activation(n)
        attrs = {**n.attrs, **requant(xq.scale[0], xq.zero_point[0], ws, yq.scale[0],
                                      yq.zero_point[0], act, rng)}
        op = "conv2d_q8" if n.op == "conv2d" else "dense_q8"
        self.nodes.append(Node(n.name, op, tuple(inputs), (self.out(y, yq),), attrs))

    def fixed_param(self, name: str) -> dict | None:
        rec = (self.fixed or {}).get(name)
        return rec if isinstance(rec, dict) else None

    def fixed_weights(self, n: Node, w: Tensor) -> tuple[np.ndarray, tuple[float, ...]]:
        """The QDQ file's int8 weights, recovered from the folded floats with its scales."""
        rec = self.fixed_param(w.name)
        assert rec is not None
        scales = np.asarray(rec["scale"], np.float32)
        r = np.asarray(w.data, np.float64) / scales.reshape((-1,) + (1,) * (w.data.ndim - 1))
        q = np.round(r)
        if np.abs(r - q).max() > QDQ_GRID_TOL or q.min() < -128 or q.max() > 127:
            raise ModelError(f"node '{n.name}': its weights are not the QDQ file's int8 values "
                             "times their scales (changed after quantisation?)")
        return q.astype(np.int8), tuple(float(s) for s in scales)

    def fixed_bias(self, n: Node, name: str, scales: tuple[float, ...]) -> np.ndarray:
        """The QDQ file's int32 bias, exactly; its scale must be s_x * s_w as the kernel's."""
        rec = self.fixed_param(name)
        assert rec is not None
        if not np.allclose(rec["scale"], scales, rtol=QDQ_BIAS_SCALE_RTOL, atol=0):
            raise ModelError(f"node '{n.name}': the QDQ file's bias scale is not input scale "
                             "times weight scale; tinytrain's int8 kernels need it to be")
        return np.asarray(rec["int32"], np.int32)

    def same_quant(self, n: Node, op: str, extra: dict | None = None) -> None:
        """Ops whose int8 form keeps the input quantisation (pools, pad, reshape)."""
        from tinytrain.ops import avg_pool2d_q8, pad_q8

        x = self.q(n.inputs[0])
        xq = self.tensors[x].quant
        assert xq is not None
        attrs = dict(n.attrs)
        if op in ("avg_pool2d_q8", "max_pool2d_q8"):
            attrs.update(avg_pool2d_q8.prepare(xq, xq))
        elif op == "pad_q8":
            attrs.update(pad_q8.prepare(xq, xq))
        attrs.update(extra or {})
        rec = (self.fixed or {}).get(n.outputs[0])
        if isinstance(rec, list) and (tuple(rec) != (xq.scale[0], xq.zero_point[0])):
            raise ModelError(f"node '{n.name}' ({n.op}): the QDQ model quantises its output "
                             "differently from its input; tinytrain's int8 form keeps the "
                             "input's scale and zero point")
        alias = x if op == "reshape" else None
        self.nodes.append(Node(n.name, op, (x,), (self.out(n.outputs[0], xq, alias),), attrs))

    def binary(self, n: Node) -> None:
        from tinytrain.ops import add_q8, mul_q8

        a, b = self.q(n.inputs[0]), self.q(n.inputs[1])
        for t in (a, b):
            if self.tensors.get(t) is None or self.tensors[t].quant is None:
                raise ModelError(f"node '{n.name}' ({n.op}): --quantize supports {n.op} of two "
                                 "activations only (this one has a constant operand that "
                                 "varies over height or width)")
        y, act, rng, yq = self.activation(n) if n.op == "add" else \
            (n.outputs[0], "NONE", (-128, 127), self.quant_of(n.outputs[0]))
        prep = (add_q8 if n.op == "add" else mul_q8).prepare
        attrs = {**prep(self.tensors[a].quant, self.tensors[b].quant, yq, rng),
                 **grad_range(act, *rng)}
        self.nodes.append(Node(n.name, f"{n.op}_q8", (a, b), (self.out(y, yq),), attrs))

    def unary(self, n: Node, op: str) -> None:
        from tinytrain.ops import hard_sigmoid_q8, hard_swish_q8, logistic_q8, mean_q8

        x = self.q(n.inputs[0])
        xq = self.tensors[x].quant
        assert xq is not None
        if op == "hard_sigmoid_q8":
            yq = hard_sigmoid_q8.OUT_Q
            attrs = hard_sigmoid_q8.prepare(xq, n.attrs["alpha"], n.attrs["beta"])
        elif op == "logistic_q8":
            yq = QuantParams((1 / 256,), (-128,))
            attrs = logistic_q8.prepare(xq, yq)
        elif op == "mean_q8":
            yq = self.quant_of(n.outputs[0])
            attrs = mean_q8.prepare(xq, yq, bool(n.attrs.get("keepdims", 1)))
        else:
            yq = self.quant_of(n.outputs[0])
            attrs = hard_swish_q8.prepare(xq, yq)
        self.nodes.append(Node(n.name, op, (x,), (self.out(n.outputs[0], yq),), attrs))

    def concat(self, n: Node) -> None:
        from tinytrain.ops import concat_q8, quantize_q8

        yq = self.quant_of(n.outputs[0])
        ins = []
        for i in n.inputs:
            x = self.q(i)
            xq = self.tensors[x].quant
            if xq != yq:  # TFLite's int8 concat copies bytes: requantise mismatched inputs
                rq = f"{x}_requant"
                self.tensors[rq] = Tensor(rq, self.tensors[x].shape, ACTIVATION, dtype="s8",
                                          quant=yq)
                self.nodes.append(Node(f"{n.name}_{x}_requant", "quantize_q8", (x,), (rq,),
                                       quantize_q8.prepare(xq, yq)))
                x = rq
            ins.append(x)
        attrs = {**n.attrs, **concat_q8.prepare([yq] * len(ins), yq)}
        self.nodes.append(Node(n.name, "concat_q8", tuple(ins), (self.out(n.outputs[0], yq),),
                               attrs))

    def run(self) -> Graph:
        g = self.g
        inp = g.t(g.inputs[0])
        self.tensors[inp.name] = inp.replace(dtype="s8", quant=self.quant_of(inp.name))
        for t in g.tensors.values():
            if t.kind not in (ACTIVATION, INPUT) and t.name not in self.tensors:
                self.tensors[t.name] = t
        simple = {"avg_pool2d": "avg_pool2d_q8", "max_pool2d": "max_pool2d_q8",
                  "pad": "pad_q8", "reshape": "reshape"}
        unary = {"sigmoid": "logistic_q8", "global_avg_pool": "mean_q8",
                 "hard_sigmoid": "hard_sigmoid_q8",
                 "hard_swish": "hard_swish_q8"}
        floats = self.float_nodes()
        for n in g.nodes:
            if n.phase != "forward" or n.name in self.fused:
                continue
            self.current = n  # named by quantize_graph if its constants fail
            if n.name in floats:
                self.keep_float(n)
            elif n.op in ("conv2d", "dense"):
                self.layer(n)
            elif n.op in ("add", "mul"):
                self.binary(n)
            elif n.op in simple:
                self.same_quant(n, simple[n.op])
            elif n.op in unary:
                self.unary(n, unary[n.op])
            elif n.op == "concat":
                self.concat(n)
            else:
                raise ModelError(f"node '{n.name}' ({n.op}) cannot be quantised to int8 yet; "
                                 f"--quantize int8 supports: {', '.join(SUPPORTED)}")
        outputs = tuple(self.q(o) for o in g.outputs)
        used = {t for n in self.nodes for t in n.inputs + n.outputs}
        tensors = {k: t for k, t in self.tensors.items()
                   if k in used or k in outputs or t.kind == PARAM or k in g.inputs}
        how = "ONNX QDQ scales" if self.fixed is not None else "post-training"
        meta = {**g.meta, "quantized": f"int8 ({how}, per-channel weights)"}
        return g.replace(tensors=tensors, nodes=tuple(self.nodes), outputs=outputs, meta=meta)


def quantize_graph(g: Graph, ranges: Ranges, fixed: dict | None = None) -> Graph:
    """fp32 graph (straight from import) -> int8 graph, using calibration ranges, or with
    `fixed` (an ONNX QDQ model's meta["qdq"]) the file's quantisation exactly."""
    q = _Q(g, ranges, fixed)
    try:
        return q.run()
    except (ValueError, OverflowError, ZeroDivisionError) as e:  # a constant out of int range
        node = q.current
        where = f"node '{node.name}' ({node.op})" if node is not None else "the model"
        raise ModelError(f"{where} cannot be quantised to int8: its scales do not fit the "
                         f"integer arithmetic ({e}); the weights or activations are out of "
                         "the range int8 training can represent") from None
