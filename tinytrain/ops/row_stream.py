"""A stage of frozen forward layers run row by row (built by passes/stream.py).

The stage's intermediate tensors never exist whole: each lives in a ring of a few rows inside
one scratch buffer, and a static schedule says which layer computes which row next. Its
inputs (the sample, the parameters) and its one output are ordinary whole tensors.

attrs: fetch (the sample, when its rows are fetched into a ring from the input source as the
schedule's step (len(_nodes), row) rather than read from a whole buffer), _nodes (the original
nodes), _schedule ((node index, row) pairs), _rings ({tensor:
(offset in the scratch, rows kept, bytes per row)}), _shapes (every stage tensor's shape),
scratch (bytes), steps (schedule length). Outputs: the exit, the scratch, and the whole 1-bit
masks of the stage's trained layers (q8_clamp_mask nodes, run on each row as it is made; a
row's bits start on a whole byte). Each row kernel is the one the whole-tensor kernel
loops over, so a streamed stage is bit-identical to running its layers one after another.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, get_op


class RowStream(OpDef):
    name = "row_stream"
    has_gradient = False

    def infer(self, node, shapes):
        sh = node.attrs["_shapes"]
        return [tuple(sh[node.outputs[0]]), (node.attrs["scratch"],),
                *(tuple(sh[m]) for m in node.outputs[2:])]

    def forward(self, node, xs):
        env = dict(zip(node.inputs, xs))
        for n in node.attrs["_nodes"]:
            outs = get_op(n.op).forward(n, [env[i] for i in n.inputs])
            env.update(zip(n.outputs, outs))
        return [env[node.outputs[0]], np.zeros(node.attrs["scratch"], np.uint8),
                *(env[m] for m in node.outputs[2:])]

    def c_call(self, node, cg):
        a = node.attrs
        shapes, rings = a["_shapes"], a["_rings"]
        scratch = cg.ptr(node.outputs[1])
        names: list[str] = []  # ring index -> tensor
        decl: list[str] = []
        for t in [*node.inputs, node.outputs[0], *rings]:
            if t in names or len(shapes.get(t, ())) != 3:
                continue
            h, w, c = shapes[t]
            if t in rings:
                off, rows, row_bytes = rings[t]
                decl.append(f"{{(int8_t *){scratch} + {off}, {rows}, {row_bytes}}}")
            else:  # a whole tensor: a ring as tall as the tensor
                decl.append(f"{{(int8_t *){cg.ptr(t)}, {h}, {w * c}}}")
            names.append(t)
        idx = {t: k for k, t in enumerate(names)}
        cases = []
        for k, n in enumerate(a["_nodes"]):
            op = get_op(n.op)
            ins = op.row_inputs(n, [shapes[i] for i in n.inputs]) or ()
            out = (cg.ptr(n.outputs[0]) if n.outputs[0] in node.outputs[2:]  # a whole mask
                   else f"r[{idx[n.outputs[0]]}]")
            call = op.row_call(n, cg, [f"r[{idx[n.inputs[i]]}]" for i in ins], out, "row")
            cases.append(f"        case {k}: {cg.member(node, k, call)} break;")
        if a.get("fetch"):  # the sample's next row, from the caller's input source
            ring = f"r[{idx[a['fetch']]}]"
            cases.append(f"        case {len(a['_nodes'])}: tt_fetch_input(tt_row(&{ring}, row), "
                         "row); break;")
        return schedule_loop(cg, a["_schedule"], decl, cases)

    def macs(self, node, shapes, out_shapes):
        return inner_macs(node)

    def members(self, node):
        return list(node.attrs["_nodes"])


def inner_macs(node) -> int:
    """The MACs of a fused node's original nodes (attrs _nodes, _shapes)."""
    sh = node.attrs["_shapes"]
    return sum(get_op(n.op).macs(n, [sh.get(i, ()) for i in n.inputs],
                                 [sh[o] for o in n.outputs]) for n in node.attrs["_nodes"])


def schedule_loop(cg, sched, decl: list[str], cases: list[str], before: tuple[str, ...] = (),
                  after: tuple[str, ...] = ()) -> str:
    """The C of a row schedule: the rings `decl` (r[0], r[1], ...), then for each (node, row)
    step the node's `case` of a switch; `before`/`after` run around the loop."""
    which = cg.static(f"static const uint8_t {{name}}[{len(sched)}] = "
                      f"{{{{{', '.join(str(k) for k, _ in sched)}}}}};")
    rows = cg.static(f"static const uint16_t {{name}}[{len(sched)}] = "
                     f"{{{{{', '.join(str(r) for _, r in sched)}}}}};")
    return "\n".join([
        "{",
        f"    tt_rows r[{len(decl)}] = {{{', '.join(decl)}}};",
        "    int32_t s;",
        *before,
        f"    for (s = 0; s < {len(sched)}; ++s) {{",
        f"        const int32_t row = {rows}[s];",
        f"        switch ({which}[s]) {{",
        *cases,
        "        default: break;",
        "        }",
        "    }",
        *after,
        "}",
    ])


OPS = (RowStream(),)
