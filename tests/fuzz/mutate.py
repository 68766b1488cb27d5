"""Model-file mutations for the compiler fuzzer (tests/fuzz/run.py).

Each family returns a new file's bytes from a seed's bytes and a numpy Generator. Byte-level
families (flip, truncate, word) apply to both formats; structured ones edit one field of a
valid file, so the mutant gets past the parser and exercises the validation behind it:

  ONNX (through the onnx protobuf): attributes (strides, pads, kernel, group, axis... set to
  0, negatives, huge values, NaN floats), initialiser dims that no longer match their data,
  initialiser dtypes, non-finite initialiser values, graph input dims, node input names,
  op types, dropped or extra node inputs.
  TFLite (in place in the flatbuffer, at the positions the tflite package reads from): tensor
  shapes, types, buffer indices, operator input/output indices, opcode indices and builtin
  codes, quantisation scales (0, negative, NaN, inf, huge) and zero points.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

# values that break assumptions: zero, negatives, off-by-one, huge, int32 limits
INTS = (0, -1, -2, 1, 2, 3, 5, 7, 64, 1000, 65535, 1 << 20, 2**31 - 1, -(2**31))
FLOATS = (0.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e-45, 1e38, 3.0e9)


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


# ---- byte level ---------------------------------------------------------------------------
def flip(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 9))):
        i = int(rng.integers(len(b)))
        b[i] ^= 1 << int(rng.integers(8))
    return bytes(b)


def truncate(data: bytes, rng: np.random.Generator) -> bytes:
    return data[:int(rng.integers(0, len(data)))]


def word(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    i = int(rng.integers(0, max(1, len(b) - 4))) & ~3
    b[i:i + 4] = struct.pack("<i", _pick(rng, INTS))
    return bytes(b)


BYTE_FAMILIES: dict[str, Callable[[bytes, np.random.Generator], bytes]] = {
    "flip": flip, "truncate": truncate, "word": word}


# ---- ONNX ---------------------------------------------------------------------------------
def _onnx(data: bytes):
    import onnx

    return onnx.load_from_string(data)


def onnx_attr(data: bytes, rng: np.random.Generator) -> bytes:
    import onnx

    m = _onnx(data)
    nodes = [n for n in m.graph.node if n.attribute]
    if not nodes:
        return data
    a = _pick(rng, _pick(rng, nodes).attribute)
    if a.type == onnx.AttributeProto.INTS and len(a.ints):
        a.ints[int(rng.integers(len(a.ints)))] = _pick(rng, INTS)
    elif a.type == onnx.AttributeProto.INT:
        a.i = _pick(rng, INTS)
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = _pick(rng, FLOATS)
    elif a.type == onnx.AttributeProto.STRING:
        a.s = _pick(rng, (b"", b"SAME_UPPER", b"VALID", b"bogus", b"reflect"))
    return m.SerializeToString()


def onnx_dims(data: bytes, rng: np.random.Generator) -> bytes:
    m = _onnx(data)
    inits = [t for t in m.graph.initializer if len(t.dims)]
    if not inits:
        return data
    t = _pick(rng, inits)
    t.dims[int(rng.integers(len(t.dims)))] = _pick(rng, INTS[:10])
    return m.SerializeToString()


def onnx_dtype(data: bytes, rng: np.random.Generator) -> bytes:
    m = _onnx(data)
    if not m.graph.initializer:
        return data
    _pick(rng, m.graph.initializer).data_type = int(rng.integers(0, 24))
    return m.SerializeToString()


def onnx_values(data: bytes, rng: np.random.Generator) -> bytes:
    from onnx import numpy_helper

    m = _onnx(data)
    floats = [t for t in m.graph.initializer if t.data_type == 1 and np.prod(t.dims) > 0]
    if not floats:
        return data
    t = _pick(rng, floats)
    a = numpy_helper.to_array(t).copy()
    a.reshape(-1)[int(rng.integers(a.size))] = _pick(rng, FLOATS)
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    return m.SerializeToString()


def onnx_input_shape(data: bytes, rng: np.random.Generator) -> bytes:
    m = _onnx(data)
    ins = [i for i in m.graph.input if i.type.tensor_type.shape.dim]
    if not ins:
        return data
    dims = _pick(rng, ins).type.tensor_type.shape.dim
    d = dims[int(rng.integers(len(dims)))]
    if rng.random() < 0.2:
        d.dim_param = "n"
    else:
        d.dim_value = _pick(rng, INTS[:11])
    return m.SerializeToString()


def onnx_names(data: bytes, rng: np.random.Generator) -> bytes:
    m = _onnx(data)
    n = _pick(rng, m.graph.node)
    if rng.random() < 0.5 and len(n.input):
        n.input[int(rng.integers(len(n.input)))] = _pick(rng, ("", "missing", n.output[0]))
    else:
        n.output[0] = _pick(rng, [o for k in m.graph.node for o in k.output] + [""])
    return m.SerializeToString()


def onnx_op(data: bytes, rng: np.random.Generator) -> bytes:
    m = _onnx(data)
    ops = ("Conv", "Relu", "Add", "Mul", "Gemm", "MatMul", "Reshape", "Flatten", "Clip",
           "GlobalAveragePool", "MaxPool", "Softmax", "Transpose", "Concat", "Sigmoid", "Foo")
    _pick(rng, m.graph.node).op_type = _pick(rng, ops)
    return m.SerializeToString()


def onnx_arity(data: bytes, rng: np.random.Generator) -> bytes:
    m = _onnx(data)
    n = _pick(rng, m.graph.node)
    if len(n.input) and rng.random() < 0.5:
        del n.input[int(rng.integers(len(n.input)))]
    else:
        n.input.append(_pick(rng, [i.name for i in m.graph.initializer] + [n.input[0]]
                             if len(n.input) else ["x"]))
    return m.SerializeToString()


ONNX_FAMILIES = {"onnx_attr": onnx_attr, "onnx_dims": onnx_dims, "onnx_dtype": onnx_dtype,
                 "onnx_values": onnx_values, "onnx_input_shape": onnx_input_shape,
                 "onnx_names": onnx_names, "onnx_op": onnx_op, "onnx_arity": onnx_arity}


# ---- TFLite -------------------------------------------------------------------------------
def _slots(data: bytes) -> dict[str, list[tuple[int, str]]]:
    """Byte positions of the fields the structured TFLite families edit: (position, format)."""
    import tflite

    m = tflite.Model.GetRootAsModel(data, 0)
    sg = m.Subgraphs(0)
    out: dict[str, list[tuple[int, str]]] = {k: [] for k in (
        "shape", "type", "buffer", "op_io", "opcode", "scale", "zero_point")}

    def scalar(tab, vo: int, fmt: str, key: str) -> None:
        o = tab.Offset(vo)
        if o:
            out[key].append((tab.Pos + o, fmt))

    def vector(tab, vo: int, size: int, fmt: str, key: str) -> None:
        o = tab.Offset(vo)
        if o:
            a = tab.Vector(o)
            out[key] += [(a + size * j, fmt) for j in range(tab.VectorLen(o))]

    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        vector(t._tab, 4, 4, "<i", "shape")
        scalar(t._tab, 6, "<b", "type")
        scalar(t._tab, 8, "<I", "buffer")
        q = t.Quantization()
        if q is not None:
            vector(q._tab, 8, 4, "<f", "scale")
            vector(q._tab, 10, 8, "<q", "zero_point")
    for k in range(sg.OperatorsLength()):
        op = sg.Operators(k)
        vector(op._tab, 6, 4, "<i", "op_io")
        vector(op._tab, 8, 4, "<i", "op_io")
        scalar(op._tab, 4, "<I", "opcode")
    for j in range(m.OperatorCodesLength()):
        c = m.OperatorCodes(j)
        scalar(c._tab, 4, "<b", "opcode")  # deprecated_builtin_code
        scalar(c._tab, 10, "<i", "opcode")  # builtin_code
    return out


def _tflite_field(key: str, values) -> Callable[[bytes, np.random.Generator], bytes]:
    def mutate(data: bytes, rng: np.random.Generator) -> bytes:
        slots = _slots(data)[key]
        if not slots:
            return data
        pos, fmt = _pick(rng, slots)
        v = _pick(rng, values)
        if fmt == "<b":
            v = int(v) % 256 - 128 if not -128 <= int(v) < 128 else int(v)
        elif fmt == "<I":
            v = int(v) % 2**32
        elif fmt == "<f":
            v = float(v)
        b = bytearray(data)
        struct.pack_into(fmt, b, pos, v)
        return bytes(b)

    return mutate


TFLITE_FAMILIES = {
    "tfl_shape": _tflite_field("shape", INTS),
    "tfl_type": _tflite_field("type", tuple(range(-1, 20))),
    "tfl_buffer": _tflite_field("buffer", INTS),
    "tfl_op_io": _tflite_field("op_io", INTS),
    "tfl_opcode": _tflite_field("opcode", (0, 1, 3, 4, 9, 17, 22, 28, 32, 39, 80, 127, 200,
                                           -1, 1000)),
    "tfl_scale": _tflite_field("scale", FLOATS),
    "tfl_zero_point": _tflite_field("zero_point", (-129, 128, 255, -300, 2**40, -1, 0, 1)),
}
