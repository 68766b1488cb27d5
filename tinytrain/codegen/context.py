"""What op c_call()s use to name buffers and declare static tables while C is generated."""

from __future__ import annotations

import re

from tinytrain.errors import CompileError, OptionError
from tinytrain.ir import CONST, OPT_STATE, PARAM, PARAM_GRAD, Graph
from tinytrain.ops.base import c_float
from tinytrain.passes.memory_layout import c_symbol
from tinytrain.passes.memory_plan import Plan

C_TYPES = {"f32": "float", "s32": "int32_t", "s8": "int8_t", "u8": "uint8_t"}
# Reference kernels with an optimised twin `<name>_opt` of the same signature (same results,
# int8 bit for bit; see runtime_c/optimized/tt_kernels_opt.h) that holds for every geometry.
OPTIMIZED_KERNELS = frozenset({
    "tt_dense_s8", "tt_dense_weight_sgd_s8", "tt_q8_clamp_mask", "tt_mask_backward_f32",
    "tt_conv2d_s8_master", "tt_dense_s8_master", "tt_cs_pw_input_add_s8_master",
    "tt_cs_pw_input_s8", "tt_cs_pw_input_add_s8", "tt_cs_dw_input_s8", "tt_cs_pw_weight_sgd_s8",
    "tt_cs_pw_weight_sgd_s8_g", "tt_cs_pw_input_add_s8_g", "tt_cs_pw_input_s8_g",
    "tt_gather_channels_s8", "tt_scatter_channels_s8", "tt_gather_channels_f32",
    "tt_scatter_channels_f32",
    "tt_cs_pw_weight_sgd_s8f", "tt_cs_x_float_s8",
    "tt_cs_dw_weight_sgd_s8", "tt_cs_mask", "tt_cs_q8_clamp", "tt_cs_bias_sgd_s32",
    "tt_cs_pw_input_f32", "tt_cs_pw_input_add_f32", "tt_cs_dw_input_f32",
    "tt_cs_pw_weight_sgd_f32", "tt_cs_dw_weight_sgd_f32", "tt_cs_bias_sgd_f32", "tt_cs_clip_f32",
    "tt_conv2d_f32", "tt_conv2d_backward_input_f32", "tt_conv2d_backward_weight_f32",
    "tt_conv2d_backward_weight_sgd_f32", "tt_dense_f32", "tt_dense_backward_input_f32",
    "tt_dense_backward_weight_f32", "tt_dense_backward_weight_sgd_f32", "tt_bias_backward_sgd_f32",
    "tt_bias_sgd_s32", "tt_bias_grad_row_f32", "tt_max_pool2d_f32", "tt_max_pool2d_backward_f32",
    "tt_conv2d_backward_input_pooled_f32", "tt_conv2d_backward_weight_pooled_f32",
    "tt_conv2d_backward_weight_sgd_pooled_f32",
})


DEFAULT_PREFIX = "tt"
MAX_PREFIX = 24  # characters; NAME_ plus the longest API name stays readable in a map file
_PREFIX_RE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
# model.c's static struct of the SGD scalars (templates/model.c.j2); file-local, so two
# models' copies never meet at link time
HYPER = "tt_hyper"
HYPER_FIELDS = {"lr": "lr", "momentum": "momentum", "wd": "weight_decay"}  # attr -> C member


def check_prefix(prefix: str) -> str:
    """`--prefix`: the name every public symbol of the generated model starts with."""
    why = ""
    if not prefix or len(prefix) > MAX_PREFIX:
        why = f"it must have 1 to {MAX_PREFIX} characters"
    elif not _PREFIX_RE.fullmatch(prefix):
        why = ("it must be a C identifier of lowercase letters, digits and single underscores, "
               "starting with a letter and not ending with an underscore (leading and double "
               "underscores are reserved in C and C++)")
    elif prefix.startswith("tt_"):
        why = "names starting with tt_ belong to the shared runtime kernels (tt_conv2d_f32, ...)"
    if why:
        raise OptionError(f"--prefix {prefix!r} cannot name the model's C symbols: {why}. "
                          f"Examples: kws, gesture_v2 (the default is {DEFAULT_PREFIX}).")
    return prefix


class CContext:
    # Defaults for contexts built without __init__ (tests compiling single c_call()s): the
    # build's SGD scalars as literals and the default arena name.
    arena = f"{DEFAULT_PREFIX}_arena"
    hyper: str | None = None  # model.c's run-time SGD scalars (None: literals)
    # fused node name -> the profile counter of its first member (render.member_bases)
    member_base: dict[str, int] = {}
    # optimised kernel families (the _opt function, or tt_conv2d_s8_pw/_reg/_dw) this build
    # keeps generic to fit the board's flash (device/kernel_choice.py)
    generic: frozenset[str] = frozenset()
    node_index = -1  # the node whose c_call() runs, for opt_sites
    opt_sites: dict[str, set[int]] | None = None
    table_bytes: dict[str, int] | None = None

    def __init__(self, g: Graph, plan: Plan, optimized: bool = True,
                 prefix: str = DEFAULT_PREFIX, generic: frozenset[str] = frozenset()) -> None:
        self.g, self.plan = g, plan
        # c_call()s may pick an optimised kernel (runtime_c/optimized/) for a geometry
        self.optimized = optimized
        self.generic = generic
        self.opt_sites = {}  # family -> the nodes that call it
        self.table_bytes = {}  # family -> bytes of the constant tables only it reads
        self.decls: list[str] = []
        self._declared: dict[str, str] = {}  # declaration text -> symbol
        self.arena = f"{prefix}_arena"
        self.hyper = HYPER  # lr, momentum and weight decay can change at run time

    def shape(self, name: str) -> tuple[int, ...]:
        return self.g.tensors[name].shape

    def ptr(self, name: str) -> str:
        t = self.g.tensors[name]
        if t.kind in (PARAM, CONST, PARAM_GRAD, OPT_STATE):
            return c_symbol(t)
        return f"(({C_TYPES[t.dtype]} *)({self.arena} + {self.plan.offset(name)}))"

    def member(self, node, k: int, call: str) -> str:
        """`call`, member k of the fused `node`, wrapped in model.c's TT_MEMBER: counted on
        its own in a `--profile-members` build; as it is where the node has no counters."""
        base = self.member_base.get(node.name)
        return call if base is None else f"TT_MEMBER({base + k}, {call});"

    def run_time(self, a: dict, key: str) -> str:
        """The C expression of update scalar `key` (lr, momentum or wd) of a node's attrs `a`:
        the model's run-time value (the build's until set_lr & co. change it), or the node's
        literal."""
        if self.hyper is None:
            return c_float(a[key])
        return f"{self.hyper}.{HYPER_FIELDS[key]}"

    def sgd_scalars(self, a: dict) -> str:
        """`lr, momentum, wd` of an fp32 update call (run_time of each)."""
        return ", ".join(self.run_time(a, k) for k in HYPER_FIELDS)

    def lr_scale(self) -> str:
        """int8 updates: the run-time learning rate over the build's (tt_q8_update.lr_scale)."""
        return "1.0f" if self.hyper is None else f"{self.hyper}.lr_scale"

    def uses_opt(self, family: str, table_bytes: int = 0) -> bool:
        """Whether this call site takes optimised kernel `family` (recording the site, and
        the bytes of a table made for it alone, for device/kernel_choice.py)."""
        if not self.optimized or family in self.generic:
            return False
        if self.opt_sites is not None and self.table_bytes is not None:
            self.opt_sites.setdefault(family, set()).add(self.node_index)
            self.table_bytes[family] = self.table_bytes.get(family, 0) + table_bytes
        return True

    def kernel(self, name: str) -> str:
        """The C function to call for reference kernel `name` in this build."""
        return f"{name}_opt" if name in OPTIMIZED_KERNELS and self.uses_opt(f"{name}_opt") \
            else name

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
