"""TFLite flatbuffer (int8 or float) -> canonical IR.

TFLite is already NHWC, so per-sample shapes are the TFLite shapes minus the batch axis.
int8 tensors keep their quantisation; op handlers (tflite_ops.py) precompute the integer
requantisation constants exactly as TFLite's Prepare functions do, so the generated C is
bit-exact with the LiteRT reference kernels.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tflite

from tinytrain.errors import ModelError
from tinytrain.frontend.builder import GraphBuilder
from tinytrain.frontend.tflite_ops import opcode
from tinytrain.ir import INPUT, Graph, QuantParams, Tensor

TYPES = {tflite.TensorType.FLOAT32: "f32", tflite.TensorType.INT8: "s8",
         tflite.TensorType.INT32: "s32", tflite.TensorType.UINT8: "u8",
         tflite.TensorType.INT16: "s16", tflite.TensorType.INT64: "s64"}
OP_NAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
TYPE_NAMES = {v: k.lower() for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}


@dataclass
class TfTensor:
    index: int
    name: str
    shape: tuple[int, ...]  # full TFLite shape, batch included
    dtype: str
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    qdim: int
    data: np.ndarray | None  # constant buffer contents
    buffer: int

    @property
    def type_name(self) -> str:
        """The TFLite name of the type (int16, not s16), for messages."""
        return TYPE_NAMES[next(k for k, v in TYPES.items() if v == self.dtype)]

    @property
    def quantized(self) -> bool:
        return len(self.scale) > 0

    def qparams(self) -> QuantParams:
        return QuantParams(self.scale, self.zero_point)


def _vec(v: Any) -> np.ndarray:
    """A flatbuffer int vector as an array (the generated code returns 0 for an absent one)."""
    return np.zeros(0, np.int64) if isinstance(v, int) else np.asarray(v, np.int64)


# zero points a file may give each tensor type, as LiteRT loads them: the type's own range
# for 8- and 16-bit codes (an int16 logistic output in an SVDF or LSTM model is scaled
# 1/65536 around -32768); the ops tinytrain supports check their own operands' zero points
ZERO_POINT_RANGE = {"s8": (-128, 127), "u8": (0, 255), "s16": (-32768, 32767),
                    "s32": (-128, 127), "s64": (0, 0), "f32": (-128, 127)}


def read_tflite(path: Path) -> tuple[bytes, Any]:
    try:
        buf = path.read_bytes()
    except OSError as e:
        raise ModelError(f"cannot read model file {path}: {e.strerror}") from None
    hint = "The file may be truncated or not a .tflite file; re-convert it and try again."
    if not buf:
        raise ModelError(f"{path} is empty (0 bytes); re-convert the model and try again.")
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        if _is_onnx(buf):
            raise ModelError(f"{path} is not a TFLite flatbuffer but an ONNX model; rename it "
                             f"to {path.with_suffix('.onnx').name} to compile it as ONNX.")
        raise ModelError(f"{path} is not a TFLite flatbuffer (no 'TFL3' identifier). {hint}")
    try:
        model = tflite.Model.GetRootAsModel(buf, 0)
        if model.SubgraphsLength() < 1:
            raise ModelError(f"{path} has no subgraph. {hint}")
        sg = model.Subgraphs(0)
        # read every field the importer uses, so that truncation shows up here (flatbuffers
        # are written back to front: a cut file loses the constant buffers first)
        for i in range(model.BuffersLength()):
            model.Buffers(i).DataAsNumpy()
        for i in range(sg.TensorsLength()):
            t = sg.Tensors(i)
            t.ShapeAsNumpy(), t.Name(), t.Buffer(), t.Type()
            q = t.Quantization()
            if q is not None:
                q.ScaleAsNumpy(), q.ZeroPointAsNumpy(), q.QuantizedDimension()
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            model.OperatorCodes(op.OpcodeIndex()).BuiltinCode()
            op.InputsAsNumpy(), op.OutputsAsNumpy()
            if op.BuiltinOptions() is not None:
                _check_table(op.BuiltinOptions(), len(buf))
        sg.InputsAsNumpy(), sg.OutputsAsNumpy()
    except ModelError:
        raise
    except (struct.error, ValueError):  # a read past the end of the file
        raise ModelError(f"{path} is not a valid TFLite model: it refers to data past the end "
                         f"of its {len(buf)} bytes, so it is truncated or damaged; re-convert it "
                         "and try again.") from None
    except Exception as e:  # flatbuffers raises struct/index errors on damaged files
        raise ModelError(f"{path} is not a valid TFLite model ({type(e).__name__}: {e}). "
                         f"{hint}") from None
    return buf, model


def _is_onnx(buf: bytes) -> bool:
    import onnx

    try:
        return len(onnx.load_from_string(buf).graph.node) > 0
    except Exception:  # any parse failure: not ONNX either
        return False


def _check_table(tab: Any, size: int) -> None:
    """Raise if a flatbuffer table (its vtable or its fields) lies beyond the file's end."""
    from flatbuffers import number_types as N

    vtable = tab.Pos - tab.Get(N.SOffsetTFlags, tab.Pos)
    vt_len, obj_len = tab.Get(N.VOffsetTFlags, vtable), tab.Get(N.VOffsetTFlags, vtable + 2)
    if vtable + vt_len > size or tab.Pos + obj_len > size:
        raise ValueError("a table extends beyond the end of the file")


class TFLiteImporter:
    def __init__(self, buf: bytes, model: Any, path: Path) -> None:
        self.buf, self.model, self.path = buf, model, path
        self.sg = model.Subgraphs(0)
        self.b = GraphBuilder()
        self.env: dict[int, str] = {}  # TFLite tensor index -> IR tensor
        self._check_indices()
        self._check_ops()  # an unsupported op is the user's problem: named before any tensor's
        self.tensors = [self._tensor(i) for i in range(self.sg.TensorsLength())]
        self.infer_output: str | None = None
        self.folded_output: int | None = None
        self.folded: dict[int, np.ndarray] = {}  # float constants computed at import
        # IR tensor -> (scale, shift) of the frozen per-channel affine that makes it
        self.affines: dict[str, tuple[str, str]] = {}
        self.output_activation: str | None = None  # a float model's final SOFTMAX
        self.output_index = int(_vec(self.sg.OutputsAsNumpy())[0]) \
            if len(_vec(self.sg.OutputsAsNumpy())) else -1

    def readers(self, index: int) -> int:
        """How many operator inputs read tensor `index`."""
        return sum(int(j) == index for q in range(self.sg.OperatorsLength())
                   for j in _vec(self.sg.Operators(q).InputsAsNumpy()))

    @staticmethod
    def _name(t: Any, i: int) -> str:
        """The tensor's name; tensors may be nameless (TFLite Micro's keyword_scrambled model):
        those are called 'tensor<i>' after their index."""
        raw = t.Name()
        return raw.decode(errors="replace") if raw else f"tensor{i}"

    def _tensor(self, i: int) -> TfTensor:
        t = self.sg.Tensors(i)
        kind = t.Type()
        if kind not in TYPES:
            raise ModelError(f"{self.path}: tensor '{self._name(t, i)}' has "
                             f"TFLite type {TYPE_NAMES.get(kind, kind)}, which tinytrain does "
                             "not support")
        q = t.Quantization()
        scale: tuple[float, ...] = ()
        zp: tuple[int, ...] = ()
        qdim = 0
        if q is not None and q.ScaleLength() > 0:
            scale = tuple(float(v) for v in q.ScaleAsNumpy())
            zp = tuple(int(v) for v in q.ZeroPointAsNumpy()) if q.ZeroPointLength() else \
                (0,) * len(scale)
            qdim = int(q.QuantizedDimension())
            self._check_quant(t, i, TYPES[kind], scale, zp)
        data = None
        bi = int(t.Buffer())
        if 0 < bi < self.model.BuffersLength():
            raw = self.model.Buffers(bi).DataAsNumpy()
            if not isinstance(raw, int) and raw.size:
                np_type = {"f32": np.float32, "s8": np.int8, "s32": np.int32, "u8": np.uint8,
                           "s16": np.int16, "s64": np.int64}[TYPES[kind]]
                shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
                want = np.dtype(np_type).itemsize * int(np.prod(shape))
                if raw.size != want:
                    raise ModelError(f"{self.path}: constant tensor "
                                     f"'{self._name(t, i)}' of shape "
                                     f"{list(shape)} needs {want} bytes but its buffer has "
                                     f"{raw.size}; the file is damaged, re-convert the model")
                data = np.frombuffer(raw.tobytes(), np_type).reshape(shape).copy()
        shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        return TfTensor(i, self._name(t, i), shape, TYPES[kind], scale, zp,
                        qdim, data, bi)

    def _check_quant(self, t: Any, i: int, dtype: str, scale: tuple[float, ...],
                     zp: tuple[int, ...]) -> None:
        """Scales finite and positive, zero points inside the type, one per scale."""
        name = self._name(t, i)
        bad = [v for v in scale if not (np.isfinite(v) and 0.0 < v < 1e30)]
        if bad:
            raise ModelError(f"{self.path}: tensor '{name}' has quantisation scale {bad[0]}; "
                             "scales must be finite and positive (the file is damaged or was "
                             "not converted by TFLite)")
        lo, hi = ZERO_POINT_RANGE.get(dtype, (0, 0))
        if len(zp) not in (1, len(scale)) or any(not lo <= z <= hi for z in zp):
            raise ModelError(f"{self.path}: tensor '{name}' ({TYPE_NAMES.get(t.Type(), dtype)}) "
                             f"has zero points {list(zp)[:4]} for {len(scale)} scales; each "
                             f"must lie in [{lo}, {hi}]")

    def _check_indices(self) -> None:
        """Every tensor, buffer and opcode index the operators and the subgraph use exists."""
        n_t, n_b = self.sg.TensorsLength(), self.model.BuffersLength()
        n_codes = self.model.OperatorCodesLength()
        for i in range(n_t):
            b = int(self.sg.Tensors(i).Buffer())
            if b >= n_b:
                raise ModelError(f"{self.path}: tensor {i} refers to buffer {b}, the file has "
                                 f"{n_b}; the file is damaged, re-convert the model")
        for which, idx in (("input", self.sg.InputsAsNumpy()),
                           ("output", self.sg.OutputsAsNumpy())):
            for v in _vec(idx):
                if not 0 <= int(v) < n_t:
                    raise ModelError(f"{self.path}: the subgraph's {which} is tensor {int(v)}, "
                                     f"the file has {n_t} tensors; the file is damaged")
        for k in range(self.sg.OperatorsLength()):
            op = self.sg.Operators(k)
            if not 0 <= int(op.OpcodeIndex()) < n_codes:
                raise ModelError(f"{self.path}: operator {k} uses opcode {op.OpcodeIndex()}, the "
                                 f"file has {n_codes}; the file is damaged")
            ins, outs = _vec(op.InputsAsNumpy()), _vec(op.OutputsAsNumpy())
            if not len(outs):
                raise ModelError(f"{self.path}: operator {k} has no output tensor; the file is "
                                 "damaged")
            for kind, vals, low in (("input", ins, -1), ("output", outs, 0)):
                for v in vals:
                    if not low <= int(v) < n_t:
                        raise ModelError(f"{self.path}: operator {k} has {kind} tensor {int(v)}, "
                                         f"the file has {n_t} tensors (0..{n_t - 1}"
                                         f"{', or -1 for none' if low < 0 else ''}); the file is "
                                         "damaged")

    def is_float(self, op: Any) -> bool:
        """A float operator: it computes float32 (DEQUANTIZE, int8 in, is an int8 one)."""
        out = int(_vec(op.OutputsAsNumpy())[0])
        return self.sg.Tensors(out).Type() == tflite.TensorType.FLOAT32 and \
            opcode(self.model, op) != tflite.BuiltinOperator.DEQUANTIZE

    def handler(self, op: Any) -> Callable | None:
        from tinytrain.frontend.tflite_float import FLOAT_HANDLERS
        from tinytrain.frontend.tflite_ops import HANDLERS
        from tinytrain.frontend.tflite_shape import SHAPE_HANDLERS

        code = opcode(self.model, op)
        if code in SHAPE_HANDLERS:  # shape arithmetic, whatever the model's type
            return SHAPE_HANDLERS[code]
        return (FLOAT_HANDLERS if self.is_float(op) else HANDLERS).get(code)

    def _check_ops(self) -> None:
        """Every operator has a handler; else name the first (and a few more) and the list."""
        from tinytrain.frontend.tflite_float import FLOAT_SUPPORTED
        from tinytrain.frontend.tflite_ops import SUPPORTED
        from tinytrain.frontend.tflite_shape import SHAPE_SUPPORTED

        ops = [self.sg.Operators(k) for k in range(self.sg.OperatorsLength())]
        unsupported = [k for k, op in enumerate(ops) if self.handler(op) is None]
        if unsupported:
            k = unsupported[0]
            code = opcode(self.model, ops[k])
            also = ""
            if len(unsupported) > 1:
                also = " (also: " + ", ".join(
                    f"{OP_NAMES.get(opcode(self.model, ops[j]), '?')} at "
                    f"operator {j}" for j in unsupported[1:6]) + ")"
            kind = "float32" if self.is_float(ops[k]) else "int8"
            hint = ""
            if code == tflite.BuiltinOperator.WHILE:
                hint = (" TensorFlow's converter writes a Keras 3 LSTM or GRU (or any "
                        "tf.while_loop) as a WHILE loop over subgraphs, which tinytrain does not "
                        "import: export a PyTorch LSTM or GRU through ONNX, or convert a Keras 2 "
                        "LSTM (the tf_keras package, TF_USE_LEGACY_KERAS=1) with a fixed batch "
                        "size of 1, which the converter fuses into "
                        "UNIDIRECTIONAL_SEQUENCE_LSTM.")
            raise self.fail(k, f"the operator {OP_NAMES.get(code, code)} is not supported "
                               f"on {kind} tensors{also}.{hint} Supported TFLite operators: int8: "
                               f"{', '.join(SUPPORTED)}; float32: "
                               f"{', '.join(FLOAT_SUPPORTED)}; on constant shapes: "
                               f"{', '.join(SHAPE_SUPPORTED)}")

    # ---- errors -------------------------------------------------------------------------
    def fail(self, k: int, msg: str) -> ModelError:
        op = self.sg.Operators(k)
        name = self.op_label(k)
        code = OP_NAMES.get(opcode(self.model, op), str(opcode(self.model, op)))
        return ModelError(f"{self.path}: operator {k} ('{name}', {code}): {msg}")

    def op_label(self, k: int) -> str:
        """Operators have no names in TFLite; use the name of the first output tensor."""
        outs = self.sg.Operators(k).OutputsAsNumpy()
        if isinstance(outs, int) or not len(outs) or \
                not 0 <= int(outs[0]) < self.sg.TensorsLength():
            return f"op{k}"
        return self._name(self.sg.Tensors(int(outs[0])), int(outs[0]))

    # ---- helpers for handlers -------------------------------------------------------------
    def act(self, k: int, i: int) -> str:
        """IR tensor of TFLite tensor i used as an activation input of operator k."""
        if i not in self.env:
            t = self.tensors[i]
            raise self.fail(k, f"input '{t.name}' is not produced by an earlier operator "
                               "(constant activations are not supported)")
        t, ir = self.tensors[i], self.b.tensors[self.env[i]]
        if ir.dtype != t.dtype:  # a damaged type field, or an op wired to the wrong tensor
            raise self.fail(k, f"input '{t.name}' is declared {t.type_name}, but the operator "
                               f"producing it makes {ir.dtype}")
        return self.env[i]

    def per_sample(self, k: int, t: TfTensor) -> tuple[int, ...]:
        if not t.shape or t.shape[0] != 1:
            raise self.fail(k, f"tensor '{t.name}' has shape {list(t.shape)}; tinytrain needs "
                               "a leading batch axis of 1")
        return t.shape[1:]

    def run(self) -> Graph:
        from tinytrain.frontend.tflite_shape import SHAPE_HANDLERS

        ins, outs = self.sg.InputsAsNumpy(), self.sg.OutputsAsNumpy()
        ins, outs = _vec(ins), _vec(outs)
        if len(ins) != 1 or len(outs) != 1:
            raise ModelError(f"{self.path}: tinytrain needs exactly one input and one output; "
                             f"the model has {len(ins)} and {len(outs)}")
        t_in = self.tensors[int(ins[0])]
        if t_in.dtype not in ("f32", "s8"):
            extra = " (int16 activations, as in 16x8 quantisation, are not supported)" \
                if t_in.dtype == "s16" else ""
            raise ModelError(f"{self.path}: input '{t_in.name}' is {t_in.type_name}; tinytrain "
                             f"supports float32 and int8 model inputs{extra}")
        shape = self.per_sample(0, t_in) if t_in.shape and t_in.shape[0] == 1 else t_in.shape
        in_name = self.b.add_tensor(Tensor(
            "input", tuple(shape), INPUT, dtype=t_in.dtype,
            quant=t_in.qparams() if t_in.dtype == "s8" else None))
        self.env[t_in.index] = in_name
        self.input_index, self.input_perm = t_in.index, None  # set by a leading TRANSPOSE
        n_ops = self.sg.OperatorsLength()
        for k in range(n_ops):
            op = self.sg.Operators(k)
            handler = self.handler(op)
            assert handler is not None  # _check_ops named any operator without one
            try:
                handler(self, k, op)
            except ModelError:
                raise
            except (ValueError, IndexError, KeyError, TypeError, AssertionError, struct.error,
                    ZeroDivisionError, OverflowError, FloatingPointError) as e:
                # a damaged operator whose tensors or options no check above anticipated
                raise self.fail(k, f"its tensors or options are inconsistent and cannot be "
                                   f"imported ({type(e).__name__}: {e}); the file is damaged "
                                   "or uses a form of this operator tinytrain does not "
                                   "support") from None
        t_out = self.tensors[int(outs[0])]
        if t_out.index not in self.env:
            raise ModelError(f"{self.path}: the output '{t_out.name}' does not depend on the "
                             "input")
        out = self.env[t_out.index]
        logits = self.training_output(out)
        meta = {
            "source_format": "tflite",
            "model_sha256": hashlib.sha256(self.buf).hexdigest(),
            "model_name": self.path.name,
            "input_name": t_in.name,
            "input_logical_shape": list(shape),
            # TFLite is channel-last; a leading TRANSPOSE (NCHW exports) relabels the input
            "input_perm": self.input_perm or list(range(len(shape))),
            "output_name": t_out.name,
            "output_logical_shape": list(self.b.tensors[out].shape),
            "output_perm": list(range(len(self.b.tensors[out].shape))),
            "output_activation": self.output_activation,
            "infer_output": out,
            "input_tflite_dtype": t_in.dtype,
            # a float model: `export` writes real values (a --quantize int8 build's dequantised)
            "float_source": all(self.is_float(self.sg.Operators(j)) or
                                opcode(self.model, self.sg.Operators(j)) in SHAPE_HANDLERS
                                for j in range(n_ops)),
            "output_tflite_dtype": t_out.dtype,
        }
        outputs = [logits] if logits == out else [logits, out]
        return self.b.graph([in_name], outputs, meta)

    def training_output(self, out: str) -> str:
        """The tensor the loss reads: the logits before a final softmax, else the output."""
        producer = next((n for n in reversed(self.b.nodes) if out in n.outputs), None)
        if producer is not None and producer.op == "softmax_q8":
            return producer.inputs[0]
        return out


def load_tflite(path: Path) -> Graph:
    path = Path(path)
    buf, model = read_tflite(path)
    return TFLiteImporter(buf, model, path).run()
