"""What a build directory holds besides the C project: the file names, and program.json, the
description of the built program that the runner, the twins and the exporters read (its
inputs and outputs, trainable tensors, state table and profiled ops)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinytrain.boards import Board
from tinytrain.codegen.render import model_id, profile_members, profile_ops
from tinytrain.ir import Graph
from tinytrain.passes.memory_layout import state_table
from tinytrain.passes.receive import received

PROGRAM_JSON = "program.json"
REPORT_JSON = "report.json"
MEMORY_JSON = "memory.json"


def program_info(g: Graph, board: Board, prefix: str = "tt",
                 fp32_fma: bool = False) -> dict[str, Any]:
    """What the runner and exporter need to know about the built program (`fp32_fma`: built
    with --fp32-mac fused, which the exported library's runtime must be too)."""
    label = next(t for t in g.tensors.values() if t.kind == "label")
    x = g.t(g.inputs[0])
    up = upstream_trainables(g)
    return {
        "board": board.ref,  # a name, or the path of a board file outside the package
        "c_prefix": prefix,  # the model's C names (tinytrain export-lib names its files so)
        "fp32_mac": "fused" if fp32_fma else "separate",
        "model_id": model_id(g),
        "profile_ops": profile_ops(g),
        # counted after the ops' counters, when count_members (Options.profile_members)
        "profile_members": profile_members(g),
        **{k: v for k, v in g.meta.items() if k != "sgd"},
        "sgd": g.meta.get("sgd"),
        "input_shape_ir": list(x.shape),
        # the sample crosses the link in the input's own dtype: int8 codes for int8 models
        "input_dtype": x.dtype,
        "input_quant": None if x.dtype != "s8" or x.quant is None else
        {"scale": float(x.quant.scale[0]), "zero_point": int(x.quant.zero_point[0])},
        "output_shape_ir": list(g.t(g.meta.get("infer_output") or g.outputs[0]).shape),
        "target_shape": list(label.shape),
        "target_dtype": label.dtype,
        "trainable": [{"name": t.name, "shape": _whole_shape(g, t.name), "dtype": t.dtype,
                       "scale": None if t.quant is None else list(t.quant.scale),
                       "source": None if t.source is None else
                       {"node": t.source.node, "slot": t.source.slot,
                        "transform": t.source.transform},
                       "upstream": up[t.name], **_packed(g, t.name)}
                      for t in g.params(trainable=True)],
        # the model's state table (model.h NAME_state): what the link's g/s commands carry
        "state": [{"name": e.name, "shape": list(e.shape), "dtype": e.dtype}
                  for e in state_table(g)],
        # --receive: the frozen tensors the link's W/X/Y commands replace and read, in order
        "received": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype,
                      "scale": None if t.quant is None else list(t.quant.scale),
                      "source": None if t.source is None else
                      {"node": t.source.node, "slot": t.source.slot,
                       "transform": t.source.transform}}
                     for t in map(g.t, received(g))],
    }


def upstream_trainables(g: Graph) -> dict[str, list[str]]:
    """Per trainable tensor, the other trainable tensors whose values reach its layer's output
    in the forward pass: those upstream of the layer and the layer's other parameters. A fleet
    averages a tensor only over devices that train the same of these (fleet/shares.py): the
    function the tensor takes part in is then the same on all of them."""
    trainable = {t.name for t in g.params(trainable=True)}
    reach: dict[str, set[str]] = {i: set() for i in g.inputs}  # data tensor -> upstream
    carries: dict[str, set[str]] = {}  # a tensor computed from parameters alone (a reshape)
    out: dict[str, set[str]] = {n: set() for n in trainable}
    for n in g.nodes:
        if n.phase != "forward":
            continue
        data = [i for i in n.inputs if i in reach]
        params = set().union(*(carries.get(i, set()) for i in n.inputs if i not in reach),
                             {i for i in n.inputs if i in trainable})
        if not data:
            carries.update({o: params for o in n.outputs})
            continue
        feeding = set().union(*(reach[i] for i in data))
        for p in params:
            out[p] |= (feeding | params) - {p}
        reach.update({o: feeding | params for o in n.outputs})
    return {n: sorted(v) for n, v in out.items()}


def _packed(g: Graph, name: str) -> dict[str, Any]:
    """For a weight split by passes/split_weights: how the device's packed trained channels
    (stored_shape) and the frozen rest make the whole weight ("shape"); the link hands out
    whole weights."""
    split = g.meta.get("split_weights", {}).get(name)
    if split is None:
        return {}
    rest = g.t(split["rest"])
    return {"packed": {"channels": split["channels"], "stored_shape": list(g.t(name).shape),
                       "rest": np.asarray(rest.data).reshape(-1).tolist()}}


def _whole_shape(g: Graph, name: str) -> list[int]:
    """A parameter's shape as the user sees it (a split weight's whole shape)."""
    split = g.meta.get("split_weights", {}).get(name)
    return list(split["full_shape"]) if split else list(g.t(name).shape)
