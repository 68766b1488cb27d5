"""What op c_call()s use to name buffers and declare static tables while C is generated."""

from __future__ import annotations

from tinytrain.codegen.memory import c_symbol
from tinytrain.errors import CompileError
from tinytrain.ir import CONST, OPT_STATE, PARAM, PARAM_GRAD, Graph
from tinytrain.passes.memory_plan import Plan

C_TYPES = {"f32": "float", "s32": "int32_t", "s8": "int8_t", "u8": "uint8_t"}
# Reference kernels with an optimised twin `<name>_opt` of the same signature (same results,
# int8 bit for bit; see runtime_c/tt_kernels_opt.h) that holds for every geometry.
OPTIMIZED_KERNELS = frozenset({
    "tt_dense_s8", "tt_q8_clamp_mask",
    "tt_cs_pw_input_s8", "tt_cs_pw_input_add_s8", "tt_cs_dw_input_s8", "tt_cs_pw_weight_sgd_s8",
    "tt_cs_pw_weight_sgd_s8f", "tt_cs_x_float_s8",
    "tt_cs_dw_weight_sgd_s8", "tt_cs_mask", "tt_cs_q8_clamp", "tt_cs_bias_sgd_s32",
    "tt_cs_pw_input_f32", "tt_cs_pw_input_add_f32", "tt_cs_dw_input_f32",
    "tt_cs_pw_weight_sgd_f32", "tt_cs_dw_weight_sgd_f32", "tt_cs_bias_sgd_f32", "tt_cs_clip_f32",
    "tt_conv2d_f32", "tt_conv2d_backward_input_f32", "tt_conv2d_backward_weight_f32",
    "tt_conv2d_backward_weight_sgd_f32", "tt_dense_f32", "tt_dense_backward_input_f32",
    "tt_dense_backward_weight_f32", "tt_dense_backward_weight_sgd_f32", "tt_bias_backward_sgd_f32",
    "tt_max_pool2d_f32", "tt_max_pool2d_backward_f32",
})


class CContext:
    def __init__(self, g: Graph, plan: Plan, optimized: bool = True) -> None:
        self.g, self.plan = g, plan
        # c_call()s may pick an optimised kernel (runtime_c/tt_kernels_opt.h) for a geometry
        self.optimized = optimized
        self.decls: list[str] = []
        self._declared: dict[str, str] = {}  # declaration text -> symbol

    def shape(self, name: str) -> tuple[int, ...]:
        return self.g.tensors[name].shape

    def ptr(self, name: str) -> str:
        t = self.g.tensors[name]
        if t.kind in (PARAM, CONST, PARAM_GRAD, OPT_STATE):
            return c_symbol(t)
        return f"(({C_TYPES[t.dtype]} *)(tt_arena + {self.plan.offset(name)}))"

    def kernel(self, name: str) -> str:
        """The C function to call for reference kernel `name` in this build."""
        return f"{name}_opt" if self.optimized and name in OPTIMIZED_KERNELS else name

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
        bad = [int(v) for v in values if not -(2**31) <= int(v) < 2**31]
        if bad:
            raise CompileError(f"an index table holds {bad[0]}, which does not fit int32_t")
        body = ", ".join(str(int(v)) for v in values)
        decl = f"static const int32_t {{name}}[{len(values)}] = {{{{{body}}}}};"
        return self.static(decl)
