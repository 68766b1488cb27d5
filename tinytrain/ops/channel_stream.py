"""A backward region run one channel at a time (built by passes/channel_stream.py).

The region starts at a 1x1 conv's input gradient (channel c of it reads every channel of its
dy and column c of the weight) and continues through ops that act on each channel alone:
ReLU/ReLU6 masks, depthwise input gradients, bias and weight updates fused with their
gradients, and 1x1 input gradients into which channel c adds its share. The loop over c keeps
one plane (H x W floats) per live per-channel tensor in a scratch buffer; the region's inputs
and its outputs (the input gradient it ends in, the parameters it updates) are whole tensors.

attrs: channels (C), plane (floats per slot), scratch (the slots' tensor), out_shapes,
_nodes (the original nodes, in order), _slots ({per-channel tensor: slot}), _shapes (every
region tensor's shape), x_float (optional, passes/x_float.py: {int8 update input: (float
offset in the scratch, zero point)}, converted to float once before the loop), group, _held,
_grouped (optional, passes/channel_group.py: {tensor: float offset of its `group` kept planes;
channel c writes plane c mod group}, the int8 1x1 updates and sinks run once per group),
_hoisted (optional, the same pass: the int8 source, run at each group's first channel for the
group, into its kept planes). Each
sub-op's per-channel kernel adds its floats in the order the whole-tensor kernel does, so the
region gives bit-identical results.
"""

from __future__ import annotations

import numpy as np

from tinytrain.ops.base import OpDef, c_float, channel_run, get_op
from tinytrain.ops.conv2d import geom_decl
from tinytrain.ops.conv2d_q8 import floats
from tinytrain.ops.fused_update import _hyper, _m
from tinytrain.ops.q8_update import _idx, _shadow, _update


def _hw(shape) -> int:
    return int(shape[0]) * int(shape[1])


class ChannelStream(OpDef):
    name = "channel_stream"
    has_gradient = False

    def infer(self, node, shapes):
        return [tuple(s) for s in node.attrs["out_shapes"]]

    def forward(self, node, xs):
        env = dict(zip(node.inputs, xs))
        for n in node.attrs["_nodes"]:
            outs = get_op(n.op).forward(n, [env[i] for i in n.inputs])
            env.update(zip(n.outputs, outs))
        return [np.zeros(s, np.float32) if o == node.attrs["scratch"] else env[o]
                for o, s in zip(node.outputs, node.attrs["out_shapes"])]

    def c_call(self, node, cg):
        a = node.attrs
        slots, shapes, plane = a["_slots"], a["_shapes"], a["plane"]
        subs = a["_nodes"]
        merged = {i: m for m in subs if m.op == "merge_channels" for i in m.inputs}

        # passes/channel_group.py: planes kept for `group` channels, updates run per group
        group, held, grouped = a.get("group", 1), a.get("_held", {}), a.get("_grouped", ())

        def p(t: str) -> str:
            if t in held:  # channel c's plane among the group's
                return f"(pl + {held[t]} + (c & {group - 1}) * {plane})"
            return f"(pl + {slots[t] * plane})" if t in slots else cg.ptr(t)

        zero, body, late = [], [], []
        xf = a.get("x_float", {})  # int8 update inputs converted once (passes/x_float.py)
        for k, n in enumerate(self.members(node)):
            hoisted = n.name == a.get("_hoisted")
            if hoisted:
                call = self._source_call(n, cg, held, shapes, plane, group, a["channels"])
            elif n.name in grouped:
                call = self._group_call(n, cg, p, held, shapes, plane, group, merged, zero)
            else:
                call = self._sub_call(n, cg, p, slots, shapes, merged, zero, xf)
            # the reference kernel, or its optimised twin when the build uses them
            kernel = call.split("(", 1)[0]
            line = cg.member(node, k, cg.kernel(kernel) + call[len(kernel):])
            if hoisted:  # at the group's first channel, for the group
                line = f"if ((c & {group - 1}) == 0) {{ {line} }}"
            (late if n.name in grouped else body).append("        " + line)
        if late:  # after the group's last channel (or the region's)
            last = a["channels"] - 1
            body += [f"        if ((c & {group - 1}) == {group - 1} || c == {last}) {{",
                     *("    " + line for line in late), "        }"]
        return "\n".join([
            "{",
            f"    float *const pl = {cg.ptr(a['scratch'])};",
            "    int32_t c;",
            *(f"    memset({cg.ptr(t)}, 0, sizeof(float) * {n});" for t, n in zero),
            *(f"    {cg.kernel('tt_cs_x_float_s8')}((pl + {off}), {cg.ptr(x)}, "
              f"{cg.g.t(x).size}, {zp});" for x, (off, zp) in xf.items()),
            f"    for (c = 0; c < {a['channels']}; ++c) {{",
            *body,
            "    }",
            "}",
        ])

    @staticmethod
    def _group_call(n, cg, p, held, shapes, plane, group, merged, zero) -> str:
        """Channels c0..c of an int8 1x1 update or sink (c0: the group's first channel), from
        the group's kept planes."""
        a, ins = n.attrs, n.inputs
        dy = shapes[ins[0]]
        planes = f"(pl + {held[ins[0]]}), {plane}"
        chans = f"c & ~{group - 1}, (c & {group - 1}) + 1"
        if n.op == "conv2d_backward_input_q8":
            dst, dx_c, idx, k = ChannelStream._sink_target(n, cg, p, shapes, merged, zero)
            return (f"tt_cs_pw_input_add_s8_g({dst}, {planes}, {cg.ptr(ins[1])}, "
                    f"{floats(cg, a['w_scale'])}, {_hw(dy)}, {dx_c}, {idx}, {k}, {chans});")
        x, w = shapes[ins[1]], shapes[ins[2]]
        w_cin = a.get("packed_cin") or w[-1]
        return (f"tt_cs_pw_weight_sgd_s8_g({cg.ptr(ins[2])}, {_shadow(cg, n, 4)}, {planes}, "
                f"{cg.ptr(ins[1])}, {c_float(a['x_scale'])}, {a['x_zp']}, {_hw(dy)}, {x[-1]}, "
                f"{w_cin}, {_idx(cg, a)}, {chans}, {floats(cg, a['step'])}, "
                f"{_update(cg, n, 3)});")

    @staticmethod
    def _source_call(n, cg, held, shapes, plane, group, channels) -> str:
        """Channels c..c+3 (fewer at the region's end) of the region's int8 source, into the
        group's kept planes (passes/channel_group.py)."""
        dy, dx = shapes[n.inputs[0]], shapes[n.outputs[0]]
        cnt = f"{channels} - c < {group} ? {channels} - c : {group}"
        return (f"tt_cs_pw_input_s8_g((pl + {held[n.outputs[0]]}), {plane}, "
                f"{cg.ptr(n.inputs[0])}, {cg.ptr(n.inputs[1])}, "
                f"{floats(cg, n.attrs['w_scale'])}, {_hw(dy)}, {dy[-1]}, {dx[-1]}, c, {cnt});")

    def members(self, node):
        # a merge_channels only names the whole tensor its parts already fill: no call
        return [n for n in node.attrs["_nodes"] if n.op != "merge_channels"]

    @staticmethod
    def _sub_call(n, cg, p, slots, shapes, merged, zero, xf) -> str:
        """Channel c's share of sub-op n, as one C statement."""
        a = n.attrs
        q8 = n.op.endswith("_q8")
        ins = n.inputs
        if n.op in ("mask_backward", "q8_clamp_backward", "clip_backward"):
            dy = shapes[ins[0]]
            args = f"{p(n.outputs[0])}, {p(ins[0])}, {p(ins[1])}, {_hw(dy)}, {dy[-1]}, c"
            if n.op == "mask_backward":
                return f"tt_cs_mask({args});"
            if n.op == "q8_clamp_backward":
                return f"tt_cs_q8_clamp({args}, {a['lo']}, {a['hi']});"
            return f"tt_cs_clip_f32({args}, {c_float(a['lo'])}, {c_float(a['hi'])});"
        if n.op in ("bias_sgd", "bias_sgd_q8"):
            hw = _hw(shapes[ins[0]])
            if q8:
                return (f"tt_cs_bias_sgd_s32({p(ins[1])}, {p(ins[0])}, {hw}, c, "
                        f"{floats(cg, a['step'])}, {_update(cg, n, 2)});")
            return (f"tt_cs_bias_sgd_f32({p(ins[1])}, {_m(cg, n, 2)}, {p(ins[0])}, {hw}, c, "
                    f"{_hyper(cg, a)});")
        dw = a.get("groups", 1) > 1
        if n.op in ("conv2d_backward_input", "conv2d_backward_input_q8"):
            dy, dx = shapes[ins[0]], shapes[n.outputs[0]]
            ws = f", {floats(cg, a['w_scale'])}" if q8 else ""
            sfx = "s8" if q8 else "f32"
            if a.get("master"):  # 1x1 only (the pass): the weight's 16-bit master
                ws, sfx = f", {p(ins[2])}{ws}", "s8_master"
            if dw:
                return (f"tt_cs_dw_input_{sfx}({p(n.outputs[0])}, {p(ins[0])}, {p(ins[1])}{ws}, "
                        f"&{geom_decl(cg, n, dx, dy)}, c);")
            if ins[0] not in slots:  # the region's source: reads the whole dy
                return (f"tt_cs_pw_input_{sfx}({p(n.outputs[0])}, {p(ins[0])}, {p(ins[1])}{ws}, "
                        f"{_hw(dy)}, {dy[-1]}, {dx[-1]}, c);")
            dst, dx_c, idx, k = ChannelStream._sink_target(n, cg, p, shapes, merged, zero)
            return (f"tt_cs_pw_input_add_{sfx}({dst}, {p(ins[0])}, {p(ins[1])}{ws}, "
                    f"{_hw(dy)}, {dx_c}, {idx}, {k}, c);")
        if n.op in ("conv2d_weight_sgd", "conv2d_weight_sgd_q8"):
            dy, x, w = shapes[ins[0]], shapes[ins[1]], shapes[ins[2]]
            if q8:
                head = (f"{p(ins[2])}, {_shadow(cg, n, 4)}, {p(ins[0])}, {p(ins[1])}, "
                        f"{c_float(a['x_scale'])}, {a['x_zp']}")
                tail = f"c, {floats(cg, a['step'])}, {_update(cg, n, 3)}"
            else:
                head = f"{p(ins[2])}, {_m(cg, n, 3)}, {p(ins[0])}, {p(ins[1])}"
                tail = f"c, {_hyper(cg, a)}"
            sfx = "s8" if q8 else "f32"
            if dw:
                return f"tt_cs_dw_weight_sgd_{sfx}({head}, &{geom_decl(cg, n, x, dy)}, {tail});"
            w_cin = a.get("packed_cin") or w[-1]
            if ins[1] in xf:  # x already float: (w, shadow, dy, xf, x_scale, ...)
                head = (f"{p(ins[2])}, {_shadow(cg, n, 4)}, {p(ins[0])}, "
                        f"(pl + {xf[ins[1]][0]}), {c_float(a['x_scale'])}")
                sfx = "s8f"
            return (f"tt_cs_pw_weight_sgd_{sfx}({head}, {_hw(dy)}, {x[-1]}, {w_cin}, "
                    f"{_idx(cg, a)}, {tail});")
        raise AssertionError(f"channel_stream: no per-channel kernel for {n.op}")

    @staticmethod
    def _sink_target(n, cg, p, shapes, merged, zero) -> tuple[str, int, str, int]:
        """Where 1x1 sink n adds: the dx pointer, its channels, the index table and the
        weight's row length (a part of a split weight adds into its channels of the merged
        dx, which is zeroed before the loop)."""
        out, idx, k, first = n.outputs[0], "NULL", shapes[n.outputs[0]][-1], 0
        if out in merged:  # one part of a split weight: its channels of the merged dx
            m = merged[out]
            ch = m.attrs["channels"] if m.inputs[0] == out else m.attrs["rest"]
            out, k, run = m.outputs[0], len(ch), channel_run(ch)
            if run is not None:  # a run (TTE's first-k): an offset
                first = run
            else:
                idx = cg.ints(ch)
        full = shapes[out]
        if (out, full[0] * full[1] * full[2]) not in zero:
            zero.append((out, full[0] * full[1] * full[2]))
        return (f"({p(out)} + {first})" if first else p(out)), full[-1], idx, k

    def macs(self, node, shapes, out_shapes):
        sh = node.attrs["_shapes"]
        return sum(get_op(n.op).macs(n, [sh[i] for i in n.inputs], [sh[o] for o in n.outputs])
                   for n in node.attrs["_nodes"])


OPS = (ChannelStream(),)
