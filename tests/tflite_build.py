"""Write small .tflite flatbuffers for tests, and run them in LiteRT's reference kernels.

The oracle for the int8 ops is LiteRT with ``OpResolverType.BUILTIN_REF``: only the reference
kernels are the bit-exact spec (the default XNNPACK delegate and the optimized kernels round
differently). Models are built with the ``tflite`` package's generated flatbuffer builders.

    mb = ModelBuilder()
    x = mb.tensor((1, 4, 4, 3), "int8", scale=0.1, zero_point=3)
    y = mb.tensor((1, 2, 2, 3), "int8", scale=0.1, zero_point=3)
    mb.op("AVERAGE_POOL_2D", [x], [y], Options("Pool2DOptions", padding="VALID", stride_w=2,
          stride_h=2, filter_width=2, filter_height=2))
    out = run_reference(mb.build([x], [y]), [x_data])[0]

Constant tensors (weights, biases, pad amounts, reduction axes) take ``data=``; optional
operator inputs are passed as -1.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
from tflite.ActivationFunctionType import ActivationFunctionType
from tflite.BuiltinOperator import BuiltinOperator
from tflite.BuiltinOptions import BuiltinOptions
from tflite.Padding import Padding
from tflite.TensorType import TensorType

DTYPES: dict[str, tuple[int, type[np.generic]]] = {
    "float32": (TensorType.FLOAT32, np.float32),
    "int8": (TensorType.INT8, np.int8),
    "uint8": (TensorType.UINT8, np.uint8),
    "int16": (TensorType.INT16, np.int16),
    "int32": (TensorType.INT32, np.int32),
    "int64": (TensorType.INT64, np.int64),
}

# Option fields whose values may be given by name.
_ENUM_FIELDS: dict[str, type] = {
    "padding": Padding,
    "fused_activation_function": ActivationFunctionType,
}

_BUFFER_ALIGN = 16  # LiteRT reads constant data in place: keep it aligned


def _schema(table: str) -> Any:
    """The generated module of one schema table (the package re-exports the class under the
    module's name, so `tflite.Buffer` is not the module with the builder functions)."""
    return importlib.import_module(f"tflite.{table}")


Buffer, Model, Operator, OperatorCode = (_schema(n) for n in
                                         ("Buffer", "Model", "Operator", "OperatorCode"))
QuantizationParameters, SubGraph, TensorT = (_schema(n) for n in
                                             ("QuantizationParameters", "SubGraph", "Tensor"))


@dataclass
class Options:
    """A builtin options table: its schema name and its fields in snake_case.

    ``Options("Pool2DOptions", padding="SAME", stride_w=1, ...)``. Enum fields (padding,
    fused_activation_function) accept names ("SAME", "RELU6"); list values become int32
    vectors (e.g. ReshapeOptions new_shape).
    """

    name: str
    fields: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, **fields: Any) -> None:
        self.name = name
        self.fields = fields


@dataclass
class _Tensor:
    shape: tuple[int, ...]
    dtype: str
    name: str
    scale: tuple[float, ...] | None
    zero_point: tuple[int, ...] | None
    axis: int
    data: np.ndarray | None


@dataclass
class _Op:
    code: int
    inputs: list[int]
    outputs: list[int]
    options: Options | None
    version: int


def _camel(snake: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in snake.split("_"))


def _int32_vector(b: flatbuffers.Builder, values: Sequence[int]) -> int:
    return b.CreateNumpyVector(np.asarray(values, np.int32))


def _aligned_bytes(b: flatbuffers.Builder, data: bytes) -> int:
    b.StartVector(1, len(data), _BUFFER_ALIGN)
    b.head -= len(data)
    b.Bytes[b.head:b.head + len(data)] = data
    b.vectorNumElems = len(data)
    return b.EndVector()


class ModelBuilder:
    """Collects tensors and operators of one subgraph, then serialises a Model."""

    def __init__(self, nameless: bool = False) -> None:
        self.tensors: list[_Tensor] = []
        self.ops: list[_Op] = []
        self.nameless = nameless  # write no tensor names (as some TFLite Micro models do)

    def tensor(self, shape: Sequence[int], dtype: str = "int8", *,
               scale: float | Sequence[float] | None = None,
               zero_point: int | Sequence[int] | None = None, axis: int = 0,
               data: np.ndarray | None = None, name: str | None = None) -> int:
        """Add a tensor and return its index. A list of scales makes it per-channel on `axis`;
        `data` makes it a constant."""
        if dtype not in DTYPES:
            raise ValueError(f"unsupported dtype {dtype}")
        scales = zps = None
        if scale is not None:
            scales = tuple(float(s) for s in np.atleast_1d(scale))
            zp = 0 if zero_point is None else zero_point
            zps = tuple(int(z) for z in np.broadcast_to(np.atleast_1d(zp), (len(scales),)))
        if data is not None:
            data = np.ascontiguousarray(np.asarray(data, DTYPES[dtype][1]).reshape(shape))
        idx = len(self.tensors)
        self.tensors.append(_Tensor(tuple(int(s) for s in shape), dtype, name or f"t{idx}",
                                    scales, zps, axis, data))
        return idx

    def op(self, opcode: str | int, inputs: Sequence[int], outputs: Sequence[int],
           options: Options | None = None, version: int = 1) -> None:
        code = getattr(BuiltinOperator, opcode) if isinstance(opcode, str) else int(opcode)
        self.ops.append(_Op(code, list(inputs), list(outputs), options, version))

    # ------------------------------------------------------------ serialisation

    def build(self, inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
        b = flatbuffers.Builder(1024)
        codes = sorted({(o.code, o.version) for o in self.ops})
        code_index = {c: i for i, c in enumerate(codes)}

        # buffer 0 is the empty sentinel every non-constant tensor points to
        buffer_data: list[bytes | None] = [None]
        tensor_buffer = []
        for t in self.tensors:
            if t.data is None:
                tensor_buffer.append(0)
            else:
                tensor_buffer.append(len(buffer_data))
                buffer_data.append(t.data.tobytes())

        buffers = []
        for data in buffer_data:
            vec = _aligned_bytes(b, data) if data else None
            Buffer.BufferStart(b)
            if vec is not None:
                Buffer.BufferAddData(b, vec)
            buffers.append(Buffer.BufferEnd(b))

        tensors = [self._tensor(b, t if not self.nameless else _Tensor(**{**vars(t), "name": ""}),
                                buf) for t, buf in zip(self.tensors, tensor_buffer)]
        ops = [self._operator(b, o, code_index[(o.code, o.version)]) for o in self.ops]

        op_codes = []
        for code, version in codes:
            OperatorCode.OperatorCodeStart(b)
            OperatorCode.OperatorCodeAddDeprecatedBuiltinCode(
                b, min(code, BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES))
            OperatorCode.OperatorCodeAddBuiltinCode(b, code)
            OperatorCode.OperatorCodeAddVersion(b, version)
            op_codes.append(OperatorCode.OperatorCodeEnd(b))

        tensors_vec = self._offsets(b, SubGraph.SubGraphStartTensorsVector, tensors)
        ops_vec = self._offsets(b, SubGraph.SubGraphStartOperatorsVector, ops)
        in_vec, out_vec = _int32_vector(b, inputs), _int32_vector(b, outputs)
        sg_name = b.CreateString("main")
        SubGraph.SubGraphStart(b)
        SubGraph.SubGraphAddTensors(b, tensors_vec)
        SubGraph.SubGraphAddInputs(b, in_vec)
        SubGraph.SubGraphAddOutputs(b, out_vec)
        SubGraph.SubGraphAddOperators(b, ops_vec)
        SubGraph.SubGraphAddName(b, sg_name)
        subgraph = SubGraph.SubGraphEnd(b)

        subgraphs_vec = self._offsets(b, Model.ModelStartSubgraphsVector, [subgraph])
        codes_vec = self._offsets(b, Model.ModelStartOperatorCodesVector, op_codes)
        buffers_vec = self._offsets(b, Model.ModelStartBuffersVector, buffers)
        desc = b.CreateString("tinytrain test model")
        Model.ModelStart(b)
        Model.ModelAddVersion(b, 3)
        Model.ModelAddOperatorCodes(b, codes_vec)
        Model.ModelAddSubgraphs(b, subgraphs_vec)
        Model.ModelAddDescription(b, desc)
        Model.ModelAddBuffers(b, buffers_vec)
        b.Finish(Model.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _offsets(b: flatbuffers.Builder, start, offsets: Sequence[int]) -> int:
        start(b, len(offsets))
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    @staticmethod
    def _tensor(b: flatbuffers.Builder, t: _Tensor, buffer: int) -> int:
        quant = None
        if t.scale is not None:
            scale_vec = b.CreateNumpyVector(np.asarray(t.scale, np.float32))
            zp_vec = b.CreateNumpyVector(np.asarray(t.zero_point, np.int64))
            Q = QuantizationParameters
            Q.QuantizationParametersStart(b)
            Q.QuantizationParametersAddScale(b, scale_vec)
            Q.QuantizationParametersAddZeroPoint(b, zp_vec)
            Q.QuantizationParametersAddQuantizedDimension(b, t.axis)
            quant = Q.QuantizationParametersEnd(b)
        shape_vec = _int32_vector(b, t.shape)
        name = b.CreateString(t.name) if t.name else None
        T = TensorT
        T.TensorStart(b)
        T.TensorAddShape(b, shape_vec)
        T.TensorAddType(b, DTYPES[t.dtype][0])
        T.TensorAddBuffer(b, buffer)
        if name is not None:
            T.TensorAddName(b, name)
        if quant is not None:
            T.TensorAddQuantization(b, quant)
        return T.TensorEnd(b)

    @staticmethod
    def _options(b: flatbuffers.Builder, opts: Options) -> int:
        mod = _schema(opts.name)
        values: dict[str, Any] = {}
        for key, v in opts.fields.items():  # vectors must be written before the table
            if isinstance(v, list | tuple):
                v = _int32_vector(b, v)
            elif isinstance(v, str):
                v = getattr(_ENUM_FIELDS[key], v)
            values[key] = v
        getattr(mod, f"{opts.name}Start")(b)
        for key, v in values.items():
            getattr(mod, f"{opts.name}Add{_camel(key)}")(b, v)
        return getattr(mod, f"{opts.name}End")(b)

    def _operator(self, b: flatbuffers.Builder, o: _Op, code_index: int) -> int:
        opts = self._options(b, o.options) if o.options is not None else None
        in_vec, out_vec = _int32_vector(b, o.inputs), _int32_vector(b, o.outputs)
        Op = Operator
        Op.OperatorStart(b)
        Op.OperatorAddOpcodeIndex(b, code_index)
        Op.OperatorAddInputs(b, in_vec)
        Op.OperatorAddOutputs(b, out_vec)
        if opts is not None:
            Op.OperatorAddBuiltinOptionsType(b, getattr(BuiltinOptions, o.options.name))
            Op.OperatorAddBuiltinOptions(b, opts)
        return Op.OperatorEnd(b)


def single_op_model(opcode: str, inputs: Sequence[dict[str, Any]],
                    outputs: Sequence[dict[str, Any]], options: Options | None = None,
                    version: int = 1) -> bytes:
    """A model of one operator. Each tensor is a dict of `ModelBuilder.tensor` arguments;
    tensors without `data` become graph inputs, in order."""
    mb = ModelBuilder()
    ins = [mb.tensor(**spec) for spec in inputs]
    outs = [mb.tensor(**spec) for spec in outputs]
    mb.op(opcode, ins, outs, options, version)
    graph_in = [i for i, spec in zip(ins, inputs) if spec.get("data") is None]
    return mb.build(graph_in, outs)


def run_reference(model: bytes, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run `model` in LiteRT's reference kernels (BUILTIN_REF) and return its outputs."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=model,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for detail, x in zip(it.get_input_details(), inputs):
        it.set_tensor(detail["index"], np.ascontiguousarray(x, detail["dtype"]))
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]
