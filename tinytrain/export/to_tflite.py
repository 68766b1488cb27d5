"""`tinytrain export` for TFLite builds: write the trained parameters back into a copy of the
source .tflite (integers for an int8 model; real values for a float one, dequantised when the
build was `--quantize int8`).

Training never changes a tensor's quantisation (scales and zero points are fixed; only the
integers move), so the export only overwrites the bytes of the trained parameters' constant
buffers in place. Every other byte of the file, including the flatbuffer layout, alignment and
metadata, stays as the converter wrote it. The one exception is `--new-head`, which widened the
classifier's scales at build time: those scale and zero-point vectors are overwritten in place
too (same lengths, so the layout still does not move).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections import defaultdict
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np
import tflite

from tinytrain.device.runner import load_program_info
from tinytrain.errors import DataError, ModelError
from tinytrain.frontend.tflite_import import TYPES
from tinytrain.quant.params import real_values

SOURCE = "source_model.tflite"  # build.py copies the model it compiled under this name
# little-endian as the TFLite format stores them, whatever the host's byte order
FILE_DTYPES = {"f32": np.dtype("<f4"), "s8": np.dtype("i1"), "s32": np.dtype("<i4")}


def _buffer_span(model: Any, index: int) -> tuple[int, int] | None:
    """(start, length) in the file of buffer `index`'s inline data, None if it has none.
    The `tflite` package offers no writer, so find the vector through the flatbuffer table."""
    tab = model.Buffers(index)._tab
    o = flatbuffers.number_types.UOffsetTFlags.py_type(tab.Offset(4))
    if o == 0:
        return None
    return tab.Vector(o), tab.VectorLen(o)


def _buffer_uses(model: Any) -> dict[int, int]:
    """How many operator inputs (in every subgraph) and metadata entries read each buffer: a
    trained buffer must have no reader that did not train along with it."""
    uses: dict[int, int] = defaultdict(int)
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        for k in range(sg.OperatorsLength()):
            for i in sg.Operators(k).InputsAsNumpy():
                if int(i) >= 0:
                    uses[int(sg.Tensors(int(i)).Buffer())] += 1
    for m in range(model.MetadataLength()):
        uses[int(model.Metadata(m).Buffer())] += 1
    return uses


def _check_state(info: dict[str, Any], state: dict[str, np.ndarray]) -> None:
    params = info["trainable"]
    names = [p["name"] for p in params]
    if params and state and not set(names) & set(state):
        raise DataError(f"the state file holds none of this build's parameters (it has "
                        f"{', '.join(sorted(state)[:4])}{', ...' if len(state) > 4 else ''}; "
                        f"the build trains {', '.join(names[:4])}"
                        f"{', ...' if len(names) > 4 else ''}); was it saved from another build?")
    for p in params:
        if p["name"] not in state:
            raise DataError(f"state file has no parameter '{p['name']}'; was it saved from "
                            "this build?")
        v = state[p["name"]]
        if list(v.shape) != p["shape"]:
            raise DataError(f"parameter '{p['name']}' has shape {list(v.shape)} in the state "
                            f"file, the build expects {p['shape']}")
        want = FILE_DTYPES.get(p.get("dtype", "f32"))
        if want is None:
            raise ModelError(f"internal: cannot export a {p.get('dtype')} parameter "
                             f"('{p['name']}') to TFLite")
        if v.dtype.kind != want.kind or v.dtype.itemsize != want.itemsize:
            raise DataError(f"parameter '{p['name']}' is {v.dtype} in the state file, the build "
                            f"expects {np.dtype(want.newbyteorder('='))}; pass the file written "
                            "by `tinytrain run --save`")


def _source_layout(p: dict[str, Any], v: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """IR layout -> the TFLite tensor's layout (the inverse of tflite_ops' transforms)."""
    t = p["source"]["transform"]
    if t == "identity":
        return v.reshape(shape)
    if t == "depthwise":  # IR (cout, kh, kw, 1) <- TFLite (1, kh, kw, cout)
        return v[..., 0].transpose(1, 2, 0).reshape(shape)
    raise ModelError(f"internal: no TFLite exporter for parameter transform '{t}'")


def _per_tensor(params: list[dict[str, Any]], state: dict[str, np.ndarray]):
    """(parameter, value) per TFLite tensor: a parameter stacked from several tensors (an
    LSTM's gates, ParamSource slot `tensors:a,b,..`, node the tensors' names) yields one block
    of rows per tensor, in order."""
    for p in params:
        v = np.asarray(state[p["name"]])
        slot = str((p.get("source") or {}).get("slot", ""))
        if not slot.startswith("tensors:"):
            yield p, v
            continue
        indices = slot.split(":", 1)[1].split(",")
        names = p["source"]["node"].split(",")
        rows = v.shape[0] // len(indices)
        for k, (index, name) in enumerate(zip(indices, names)):
            block = v[k * rows:(k + 1) * rows]
            yield ({**p, "shape": list(block.shape), "source": {
                **p["source"], "node": name, "slot": f"tensor:{index}", "transform": "identity"}},
                block)


def _onto_grid(t: Any, v: np.ndarray, dtype: str) -> np.ndarray:
    """Real values rounded to the nearest code of TFLite tensor t's quantisation (per tensor,
    or per channel on axis 0), saturated to the type's range: sub-step changes are lost."""
    q = t.Quantization()
    if q is None or not q.ScaleLength():
        raise ModelError(f"internal: tensor '{t.Name().decode(errors='replace')}' is {dtype} "
                         "without a scale")
    scale = np.asarray(q.ScaleAsNumpy(), np.float64)
    zp = np.asarray(q.ZeroPointAsNumpy(), np.int64) if q.ZeroPointLength() else np.zeros(1)
    if scale.size > 1:
        scale, zp = (a.reshape((-1,) + (1,) * (v.ndim - 1)) for a in (scale, zp))
    info = np.iinfo(FILE_DTYPES[dtype])
    return np.clip(np.round(np.asarray(v, np.float64) / scale) + zp, info.min, info.max)


def _tensor_index(p: dict[str, Any]) -> int:
    """The TFLite tensor a trained parameter came from (its source slot "tensor:N"), or -1."""
    slot = str((p.get("source") or {}).get("slot", ""))
    return int(slot.split(":", 1)[1]) if slot.startswith("tensor:") else -1


def _patch_vector(buf: bytearray, table: Any, field: int, fmt: str, values: list) -> bool:
    """Overwrite a numeric vector field of a flatbuffer table in place; False when the field
    is missing or has another length (the file's layout cannot grow)."""
    o = flatbuffers.number_types.UOffsetTFlags.py_type(table._tab.Offset(field))
    if o == 0:
        return False
    if table._tab.VectorLen(o) == 1 and len(set(values)) == 1:  # per-tensor in the file
        values = values[:1]
    if table._tab.VectorLen(o) != len(values):
        return False
    a = table._tab.Vector(o)
    buf[a:a + struct.calcsize(f"<{len(values)}{fmt}")] = struct.pack(f"<{len(values)}{fmt}",
                                                                      *values)
    return True


def _write_new_head(buf: bytearray, model: Any, info: dict[str, Any]) -> None:
    """A --new-head build widened its classifier's quantisation (passes/new_head.py): write the
    new scales of its weight, bias and output (and the output's zero point) in place. The
    head's int8 weights and int32 bias are rewritten with the trained parameters, so both
    must be trained."""
    h = info["new_head"]
    params = {p["name"]: p for p in info["trainable"]}
    names = [h["weight"]] + ([h["bias"]] if h.get("bias") else [])
    missing = [n for n in names if n not in params]
    if missing:
        raise ModelError("this build widened its classifier with --new-head but does not train "
                         f"{', '.join(missing)}; the exported file would keep the old values "
                         "at the new scales. Use an update plan that trains the classifier's "
                         "weight and bias (e.g. --update last:1)")
    sg = model.Subgraphs(0)
    w = _tensor_index(params[h["weight"]])
    ops = [sg.Operators(k) for k in range(sg.OperatorsLength())]
    head = [op for op in ops if w in [int(i) for i in op.InputsAsNumpy()]]
    if len(head) != 1:
        raise ModelError(f"cannot export --new-head: the classifier weight is read by "
                         f"{len(head)} operators in the source model")
    patches = [(w, h["weight_scale"], None), (int(head[0].Outputs(0)),
                                             [h["logits_quant"][0]], [h["logits_quant"][1]])]
    if h.get("bias"):
        patches.append((_tensor_index(params[h["bias"]]), h["bias_scale"], None))
    for index, scales, zero_points in patches:
        q = sg.Tensors(index).Quantization()
        ok = q is not None and _patch_vector(buf, q, 8, "f", [float(v) for v in scales])
        if ok and zero_points is not None:
            ok = _patch_vector(buf, q, 10, "q", [int(v) for v in zero_points])
        if not ok:
            raise ModelError(f"cannot export --new-head: tensor {index} of the source model "
                             "has no per-channel quantisation of the expected size to rewrite")


def export_tflite(build_dir: Path, state: dict[str, np.ndarray], out: Path) -> None:
    info = load_program_info(build_dir)
    src = Path(build_dir) / SOURCE
    if info.get("source_format") != "tflite":
        raise ModelError(f"{build_dir} was not built from a TFLite model; cannot export TFLite")
    if not src.exists():
        raise ModelError(f"{src} is missing; rebuild with `tinytrain build MODEL --out "
                         f"{build_dir}`")
    out = Path(out)
    if out.suffix.lower() == ".onnx":
        raise DataError(f"--out {out}: this build came from a .tflite model and exports a "
                        ".tflite file; name the output *.tflite")
    if out.resolve() == src.resolve():
        raise DataError(f"--out {out} is the build's copy of the source model; choose another "
                        "path")
    buf = bytearray(src.read_bytes())
    digest = hashlib.sha256(buf).hexdigest()
    if digest != info.get("model_sha256"):
        raise ModelError(f"{src} changed since the build (sha256 {digest[:16]}..., the build "
                         f"compiled {str(info.get('model_sha256'))[:16]}...); rebuild with "
                         "`tinytrain build`")
    _check_state(info, state)
    model = tflite.Model.GetRootAsModel(buf, 0)
    sg = model.Subgraphs(0)
    writes: dict[int, list[tuple[str, bytes]]] = defaultdict(list)  # buffer -> (param, bytes)
    for p, v in _per_tensor(info["trainable"], state):
        source = p["source"] or {}
        index = _tensor_index(p)
        if not 0 <= index < sg.TensorsLength():
            raise ModelError(f"internal: parameter '{p['name']}' has no TFLite tensor "
                             f"({source.get('slot', '')})")
        t = sg.Tensors(index)
        dtype = TYPES.get(t.Type())
        shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        node = source.get("node")
        if dtype == "f32" and info.get("float_source"):
            v, p = real_values(p, v), {**p, "dtype": "f32"}  # a --quantize int8 build's
        elif dtype in ("s8", "s32") and p.get("dtype", "f32") == "f32":
            # an int8 file's LSTM weights, trained in fp32: onto the tensor's own grid
            v, p = _onto_grid(t, v, dtype), {**p, "dtype": dtype}
        if dtype != p.get("dtype", "f32") or t.Name().decode(errors="replace") != node:
            raise ModelError(f"{src}: tensor {index} is not '{node}' ({p.get('dtype')}) as at "
                             "the build; rebuild with `tinytrain build`")
        data = _source_layout(p, v, shape)
        writes[int(t.Buffer())].append((p["name"], data.astype(FILE_DTYPES[dtype]).tobytes()))
    uses = _buffer_uses(model)
    for b, ws in writes.items():
        span = _buffer_span(model, b) if 0 < b < model.BuffersLength() else None
        if span is None:  # > 2 GB models keep data outside the flatbuffer (offset/size)
            raise ModelError(f"{src}: parameter '{ws[0][0]}' has no inline data in buffer {b} "
                             "(models over 2 GB store it after the flatbuffer); tinytrain "
                             "cannot export into such a file")
        start, length = span
        new = ws[0][1]
        if len(new) != length:
            raise ModelError(f"{src}: buffer {b} holds {length} bytes, parameter "
                             f"'{ws[0][0]}' needs {len(new)}")
        if new == bytes(buf[start:start + length]):
            continue
        if any(w[1] != new for w in ws[1:]):
            raise ModelError(f"parameters {', '.join(repr(w[0]) for w in ws)} share one TFLite "
                             f"buffer ({b}) but trained to different values; a .tflite file "
                             "written in place cannot hold both (the converter stores equal "
                             "constants once). Use an update plan that freezes this tensor in "
                             "every layer reading it (a plan file with bias = false for them)")
        if uses.get(b, 0) > len(ws):
            raise ModelError(f"parameter '{ws[0][0]}' shares TFLite buffer {b} with a frozen "
                             "use of it; writing the trained values would change that layer "
                             "too. Use an update plan that trains every layer reading it, or "
                             "none of them")
        buf[start:start + length] = new
    if info.get("new_head"):
        _write_new_head(buf, model, info)
    tmp = out.with_name(f".{out.name}.tt-tmp-{os.getpid()}")
    try:
        tmp.write_bytes(buf)
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise DataError(f"cannot write {out}: {e.strerror}") from None
