"""What op c_call()s use to name buffers and declare static tables while C is generated."""

from __future__ import annotations

from tinytrain.codegen.memory import c_symbol
from tinytrain.ir import CONST, OPT_STATE, PARAM, PARAM_GRAD, Graph
from tinytrain.passes.memory_plan import Plan

C_TYPES = {"f32": "float", "s32": "int32_t", "s8": "int8_t", "u8": "uint8_t"}


class CContext:
    def __init__(self, g: Graph, plan: Plan) -> None:
        self.g, self.plan = g, plan
        self.decls: list[str] = []
        self._declared: dict[str, str] = {}  # declaration text -> symbol

    def shape(self, name: str) -> tuple[int, ...]:
        return self.g.tensors[name].shape

    def ptr(self, name: str) -> str:
        t = self.g.tensors[name]
        if t.kind in (PARAM, CONST, PARAM_GRAD, OPT_STATE):
            return c_symbol(t)
        return f"(({C_TYPES[t.dtype]} *)(tt_arena + {self.plan.offset(name)}))"

    def same_buffer(self, a: str, b: str) -> bool:
        return self.ptr(a) == self.ptr(b)

    def static(self, template: str) -> str:
        """Declare a static table once (identical tables are shared); returns its symbol."""
        key = template.replace("{name}", "")
        if key in self._declared:
            return self._declared[key]
        name = f"tt_k{len(self._declared)}"
        self.decls.append(template.format(name=name))
        self._declared[key] = name
        return name

    def ints(self, values) -> str:
        body = ", ".join(str(int(v)) for v in values)
        decl = f"static const int32_t {{name}}[{len(values)}] = {{{{{body}}}}};"
        return self.static(decl)
