"""The per-layer roll-up of a compiled program (`tinytrain report --layers`): what each conv or
dense layer keeps for the backward, its gradients, its parameters and its MACs, numbered as
`--update` numbers layers (update_plan.layers).

Which layer a node belongs to is decided on the graph right after the prune pass, where the
forward nodes are the model's own and each backward node is named after the forward node whose
gradient rule emitted it (passes/autodiff.py): a conv/dense node is its layer; any other
forward op (activation, pool, add, reshape, ...) rolls up into the layer before it in forward
order (ops before the first layer into the first); the loss into the last layer (the
classifier); a backward node into its forward node's layer. Later passes keep those names or
extend them (`NAME_sgd`, `NAME_merge`, `NAME_channels`, `TENSOR_q8_mask`), so a node of the
final graph belongs to the layer of the longest name it extends; a streamed stage or channel
region (row_stream, channel_stream) counts each node it runs for that node's layer (MACs, the
buffers they read), while the region's own step, and so its gradient peak, belongs to the
layer whose name it carries (a channel region: its projection conv's).

Persistent tensors (parameters, constants, gradient accumulators, optimizer state) belong to
the one layer whose nodes touch them; state shared by several layers (the int8 rounding step
counter) goes to an "other" row, as does anything no layer claims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinytrain.ir import CONST, OPT_STATE, PARAM, PARAM_GRAD, Graph, Node
from tinytrain.ops import get_op
from tinytrain.passes.memory_layout import in_flash
from tinytrain.passes.memory_plan import Plan, step_nodes
from tinytrain.passes.update_plan import Layer, layers

OTHER = "other"
PERSISTENT = (PARAM, CONST, PARAM_GRAD, OPT_STATE)
SAVED_KINDS = ("saved for backward", "masks")  # memory_report's arena kinds kept for backward
# Columns whose total row is the sum of the rows and equals the plan's own figure: saved =
# the plan's "saved for backward" + "masks" bytes (memory.json totals_by_kind); trainable,
# param_grad, optimizer = report.json sram_bytes; frozen = flash_bytes.frozen_params;
# macs_* = report.json macs. grad_peak_bytes is a peak: its total is the largest row, the
# most gradient bytes live at any step of the program.
SUMMED = ("saved_bytes", "trainable_bytes", "param_grad_bytes", "optimizer_bytes",
          "frozen_bytes", "macs_forward", "macs_backward")
PEAKS = ("grad_peak_bytes",)
_NONE = object()  # a name no layer claims


class LayerCapture:
    """An on_pass hook for compile_model that records, after the prune pass, the layers and the
    layer of every node; it hands each pass on to `then` (e.g. `--dump-ir`'s hook)."""

    def __init__(self, then: Callable[[str, Graph], None] | None = None) -> None:
        self.then = then
        self.layers: list[Layer] = []
        self.owner: dict[str, int | None] = {}

    def __call__(self, name: str, g: Graph) -> None:
        if name == "prune":
            self.layers = layers(g)
            self.owner = node_layers(g, self.layers)
        if self.then is not None:
            self.then(name, g)


def _lookup(name: str, table: dict[str, Any]) -> Any:
    """The entry of `name`, else of the longest name it extends (at an underscore)."""
    if name in table:
        return table[name]
    i = len(name)
    while (i := name.rfind("_", 0, i)) > 0:
        if name[:i] in table:
            return table[name[:i]]
    return _NONE


def node_layers(g: Graph, lys: list[Layer]) -> dict[str, int | None]:
    """Node (and forward tensor) name -> layer index, on the graph right after prune."""
    at = {ly.node.name: ly.index for ly in lys}
    last = lys[-1].index if lys else None
    owner: dict[str, int | None] = {}
    cur = lys[0].index if lys else None
    for n in g.nodes:
        if n.phase == "forward":
            cur = at.get(n.name, cur)
            owner[n.name] = cur
        elif n.phase == "loss":
            owner[n.name] = last
    forward = dict(owner)
    for n in g.nodes:  # passes name nodes after tensors too (TENSOR_q8_mask, TENSOR_stream)
        if n.phase in ("forward", "loss"):
            for o in n.outputs:
                owner.setdefault(o, forward[n.name])
    for n in g.nodes:
        if n.phase == "backward":
            r = _lookup(n.name, forward)
            owner[n.name] = None if r is _NONE else r
    return owner


def _parts(n: Node) -> list[Node]:
    """The nodes a node runs: a streamed stage's or channel region's own, else itself."""
    return list(n.attrs["_nodes"]) if "_nodes" in n.attrs else [n]


def _macs(n: Node, g: Graph, outer: Node) -> int:
    if n is outer:
        return get_op(n.op).macs(n, [g.t(i).shape for i in n.inputs],
                                 [g.t(o).shape for o in n.outputs])
    sh = outer.attrs["_shapes"]  # as row_stream's and channel_stream's own macs() count them
    return get_op(n.op).macs(n, [sh.get(i, ()) for i in n.inputs],
                             [sh.get(o, ()) for o in n.outputs])


def _trains(g: Graph, ly: Layer) -> str:
    """What learns in a layer: w (whole weight), w K/C (K of its C input channels), b."""
    out = []
    w = g.tensors.get(ly.weight)
    if w is not None and w.kind == PARAM and w.trainable:
        ch = g.meta.get("partial_channels", {}).get(ly.weight)
        out.append(f"w {len(ch)}/{ly.in_channels}" if ch is not None
                   and len(ch) < ly.in_channels else "w")
    b = g.tensors.get(ly.bias) if ly.bias else None
    if b is not None and b.kind == PARAM and b.trainable:
        out.append("b")
    return "+".join(out) or "-"


def layer_table(g: Graph, plan: Plan, buffers: list[dict[str, Any]],
                capture: LayerCapture) -> dict[str, Any]:
    """One row per layer (+ "other" if anything is left), the totals, and which columns are
    sums of the plan. `buffers` are memory_report.buffer_table's rows."""
    lys, owner = capture.layers, capture.owner

    def row_of(n: Node, outer: Node | None = None) -> int | None:
        r = _lookup(n.name, owner)
        if r is _NONE and outer is not None and outer is not n:
            return row_of(outer)
        if r is _NONE and "_nodes" in n.attrs:
            rs = [row_of(p) for p in n.attrs["_nodes"]]
            r = next((x for x in rs if x is not None), None)
        return None if r is _NONE else r

    rows: dict[int | None, dict[str, Any]] = {
        ly.index: {"index": ly.index, "layer": ly.source, "node": ly.node.name,
                   "op": ly.node.op, "trains": _trains(g, ly)} for ly in lys}
    rows[None] = {"index": None, "layer": OTHER, "node": None, "op": None, "trains": "-"}
    for r in rows.values():
        r.update({k: 0 for k in SUMMED + PEAKS})

    # persistent tensors: the one layer whose nodes touch them (update nodes: their param's)
    touched: dict[str, set[int | None]] = {}
    for n in g.nodes:
        if n.phase == "update":
            continue
        for p in _parts(n):
            for t in (*p.inputs, *p.outputs):
                if t in g.tensors and g.t(t).kind in PERSISTENT:
                    touched.setdefault(t, set()).add(row_of(p, n))
    for n in g.nodes:
        if n.phase == "update":
            own = touched.get(n.outputs[0], set())
            r = next(iter(own)) if len(own) == 1 else row_of(n)
            for t in (*n.inputs, *n.outputs):
                if g.t(t).kind in PERSISTENT:
                    touched.setdefault(t, set()).add(r)
    column = {PARAM_GRAD: "param_grad_bytes", OPT_STATE: "optimizer_bytes"}
    for t in g.tensors.values():
        if t.kind not in PERSISTENT:
            continue
        own = touched.get(t.name, set())
        r = next(iter(own)) if len(own) == 1 else None
        if t.kind in column:
            rows[r][column[t.kind]] += t.nbytes
        elif in_flash(t):
            rows[r]["frozen_bytes"] += t.nbytes
        else:
            rows[r]["trainable_bytes"] += t.nbytes

    nodes = step_nodes(g)
    step_row = [row_of(n) for n in nodes]
    # saved for backward: the deepest layer whose backward reads the buffer (or a view of it)
    readers: dict[str, set[int | None]] = {}
    for n in nodes:
        if n.phase == "backward":
            for p in _parts(n):
                for i in p.inputs:
                    readers.setdefault(plan.views.get(i, i), set()).add(row_of(p, n))
    grad_live = [0] * len(nodes)
    for b in buffers:
        if b["kind"] in SAVED_KINDS:
            rs = readers.get(b["name"], set())
            known = [r for r in rs if r is not None]
            r = max(known) if known else (None if rs or b["first_step"] < 0 else
                                          step_row[b["first_step"]])
            rows[r]["saved_bytes"] += b["bytes"]
        elif b["kind"] == "gradients":
            for k in range(max(b["first_step"], 0), min(b["last_step"], len(nodes) - 1) + 1):
                grad_live[k] += b["bytes"]
    for k, r in enumerate(step_row):
        rows[r]["grad_peak_bytes"] = max(rows[r]["grad_peak_bytes"], grad_live[k])

    for n in g.nodes:
        if n.phase in ("forward", "backward"):
            for p in _parts(n):
                rows[row_of(p, n)][f"macs_{n.phase}"] += _macs(p, g, n)

    out = [rows[ly.index] for ly in lys]
    if any(rows[None][k] for k in SUMMED + PEAKS):
        out.append(rows[None])
    totals = {k: sum(r[k] for r in out) for k in SUMMED}
    totals.update({k: max((r[k] for r in out), default=0) for k in PEAKS})
    return {"rows": out, "totals": totals, "summed": list(SUMMED), "peaks": list(PEAKS)}


NAME_WIDTH = 30  # a longer source name keeps its end (where names differ)
HEADER = (("layer", 5), ("name", NAME_WIDTH), ("op", 10), ("trains", 9), ("saved", 9),
          ("grad peak", 9), ("trainable", 9), ("grads+opt", 9), ("frozen", 9),
          ("MACs fwd", 11), ("MACs bwd", 11))


def format_layers(t: dict[str, Any]) -> str:
    """The table `tinytrain report --layers` prints (bytes, MACs per sample)."""

    def fit(c: str, w: int) -> str:  # long source names differ at their end: keep it
        return (c if len(c) <= w else "\u2026" + c[len(c) - w + 1:]).ljust(w)

    widths = [w for _, w in HEADER]
    widths[1] = min(NAME_WIDTH, max([len(r["layer"]) for r in t["rows"]] + [5]))

    def line(cells: list[str]) -> str:
        return " ".join(c.rjust(w) if k == 0 or k >= 4 else fit(c, w)
                        for k, (c, w) in enumerate(zip(cells, widths)))

    def cells(r: dict[str, Any], idx: str, name: str, op: str, trains: str) -> list[str]:
        return [idx, name, op, trains, f"{r['saved_bytes']:,}", f"{r['grad_peak_bytes']:,}",
                f"{r['trainable_bytes']:,}",
                f"{r['param_grad_bytes'] + r['optimizer_bytes']:,}", f"{r['frozen_bytes']:,}",
                f"{r['macs_forward']:,}", f"{r['macs_backward']:,}"]

    lines = [line([h for h, _ in HEADER])]
    for r in t["rows"]:
        idx = "" if r["index"] is None else str(r["index"])
        lines.append(line(cells(r, idx, r["layer"], r["op"] or "", r["trains"])))
    lines.append(line(cells(t["totals"], "", "total", "", "")))
    lines.append(
        "bytes (MACs per sample). saved: activations and 1-bit masks kept for the layer's "
        "backward (each counted once, for the deepest layer that reads it); grad peak: the most "
        "fp32 gradient bytes live at once during the layer's steps (its total: the program's "
        "peak); trainable: its parameters in SRAM, grads+opt: their gradient accumulators and "
        "optimizer state; frozen: its parameters and constants in flash. Non-layer ops count "
        "for the layer before them, the loss for the last layer. Every total but grad peak is "
        "the plan's own figure.")
    return "\n".join(lines)
