"""Structural checks of a graph, run after every pass (`Options.check_ir`) and in tests.

They live above the op registry (shape inference is each op's), not in the IR, which the ops
themselves import."""

from __future__ import annotations

from tinytrain.errors import CompileError
from tinytrain.ir import CONST, INPUT, LABEL, OPT_STATE, PARAM, PARAM_GRAD, Graph
from tinytrain.ops import get_op


def verify(g: Graph) -> None:
    """Structural checks run after every pass in tests: SSA, defined-before-use, shapes."""
    given = (INPUT, LABEL, PARAM, CONST, PARAM_GRAD, OPT_STATE)  # exist before any node runs
    defined = {n for n, t in g.tensors.items() if t.kind in given}
    written_once: set[str] = set()
    for node in g.nodes:
        for i in node.inputs:
            if i not in g.tensors:
                raise CompileError(f"IR: node {node.name} reads unknown tensor {i}")
            if i not in defined:
                raise CompileError(f"IR: node {node.name} reads {i} before it is written")
        op = get_op(node.op)
        shapes = op.infer(node, [g.tensors[i].shape for i in node.inputs])
        for o, s in zip(node.outputs, shapes):
            if o not in g.tensors:
                raise CompileError(f"IR: node {node.name} writes unknown tensor {o}")
            if tuple(g.tensors[o].shape) != tuple(s):
                raise CompileError(
                    f"IR: node {node.name} ({node.op}) output {o} has shape "
                    f"{g.tensors[o].shape}, inference says {tuple(s)}"
                )
            kind = g.tensors[o].kind
            if kind not in (PARAM, PARAM_GRAD, OPT_STATE):
                if o in written_once:
                    raise CompileError(f"IR: tensor {o} written twice")
                written_once.add(o)
            defined.add(o)
    for o in g.outputs:
        if o not in defined:
            raise CompileError(f"IR: graph output {o} is never written")
    _check_master_reads(g)


def _check_master_reads(g: Graph) -> None:
    """--rounding master: every node that reads such a weight reads its shadow too, so no pass
    has swapped in a kernel that would read the floor."""
    for w, sh in g.meta.get("master_read", {}).items():
        for node in g.nodes:
            if w in node.inputs and sh not in node.inputs:
                raise CompileError(f"IR: node {node.name} ({node.op}) reads {w} without its "
                                   f"master {sh}")
