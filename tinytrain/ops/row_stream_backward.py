"""A backward region run row by row (built by passes/stream_backward.py).

The backward of a high-resolution stem turns the small gradient entering the region (whole)
into bias updates, through 1x1 and depthwise input gradients, 1-bit ReLU masks and residual
sums. None of its float gradients exists whole: each lives in a ring of a few rows inside one
scratch buffer, a static schedule says which sub-op makes which row next, each bias node adds
the rows of its gradient to a running per-channel sum, and once every row is in, the biases
are updated.

attrs: entry (the gradient entering the region), _nodes (the original nodes, in order),
_schedule ((node index, row) pairs), _rings
({tensor: (offset in the scratch, rows kept, bytes per row)}), _sums ({bias node index:
offset of its C float sums in the scratch}), _shapes (every region tensor's shape), scratch
(bytes). Outputs: the scratch, then the parameters the region updates. Each row kernel adds
the floats of the whole-tensor kernel in its order, so the region gives bit-identical results.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, get_op
from tinytrain.ops.row_stream import inner_macs, schedule_loop


class RowStreamBackward(OpDef):
    name = "row_stream_backward"
    has_gradient = False

    def infer(self, node, shapes):
        sh = node.attrs["_shapes"]
        return [(node.attrs["scratch"],), *(tuple(sh[p]) for p in node.outputs[1:])]

    def forward(self, node, xs):
        env = dict(zip(node.inputs, xs))
        for n in node.attrs["_nodes"]:
            outs = get_op(n.op).forward(n, [env[i] for i in n.inputs])
            env.update(zip(n.outputs, outs))
        return [np.zeros(node.attrs["scratch"], np.uint8), *(env[p] for p in node.outputs[1:])]

    def c_call(self, node, cg):
        a = node.attrs
        shapes, rings, sums = a["_shapes"], a["_rings"], a["_sums"]
        scratch = cg.ptr(node.outputs[0])
        entry = a["entry"]  # the gradient entering the region, whole: a ring as tall
        h, w, c = shapes[entry]
        names = [entry, *rings]  # ring index -> tensor
        decl = [f"{{(int8_t *){cg.ptr(entry)}, {h}, {w * c * 4}}}"]
        for t in rings:
            off, rows, row_bytes = rings[t]
            decl.append(f"{{(int8_t *){scratch} + {off}, {rows}, {row_bytes}}}")
        idx = {t: k for k, t in enumerate(names)}
        cases, finish = [], []
        for k, n in enumerate(a["_nodes"]):
            op = get_op(n.op)
            ins = op.row_inputs(n, [shapes[i] for i in n.inputs]) or ()
            rows_in = [f"r[{idx[n.inputs[i]]}]" for i in ins]
            # a bias adds its rows to its sums, then updates after the loop
            out = (f"(float *)((int8_t *){scratch} + {sums[k]})" if k in sums
                   else f"r[{idx[n.outputs[0]]}]")
            call = op.row_call(n, cg, rows_in, out, "row")
            cases.append(f"        case {k}: {cg.member(node, k, call)} break;")
            if k in sums:
                finish.append(f"    {cg.member(node, k, op.row_finish(n, cg, out))}")
        zero = [f"    memset((int8_t *){scratch} + {off}, 0, "
                f"{4 * shapes[a['_nodes'][k].inputs[0]][-1]}u);" for k, off in sorted(sums.items())]
        return schedule_loop(cg, a["_schedule"], decl, cases, tuple(zero), tuple(finish))

    def macs(self, node, shapes, out_shapes):
        return inner_macs(node)

    def members(self, node):
        return list(node.attrs["_nodes"])


OPS = (RowStreamBackward(),)
