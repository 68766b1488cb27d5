"""Render the Jinja templates into a C project. All decisions are made here, not in templates."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from tinytrain.assets import asset_dir, runtime_files
from tinytrain.boards import (
    BOARDS_DIR,
    QEMU_SOURCE,
    Board,
    FlashLayout,
    load_board,
)
from tinytrain.codegen.context import C_TYPES, DEFAULT_PREFIX, HYPER, CContext, check_prefix
from tinytrain.errors import CompileError
from tinytrain.ir import OPT_STATE, PARAM, Graph, Tensor
from tinytrain.ops import get_op
from tinytrain.ops.base import c_float, size
from tinytrain.passes.memory_layout import (
    c_symbol,
    in_flash,
    persistent,
    state_table,
    training_state,
)
from tinytrain.passes.memory_plan import Plan
from tinytrain.passes.receive import received
from tinytrain.version import __version__

TEMPLATES = asset_dir("templates")
FIRMWARE = asset_dir("firmware")
HOST_BINARY = "tt_host"
# Firmware sources every build gets; the host build adds port_host*.c, a board its own layer.
FIRMWARE_COMMON = ("tt_main.c", "tt_link.c", "tt_crc32.c", "tt_checkpoint.c")


def _values(data: np.ndarray, dtype: str = "f32") -> str:
    if dtype != "f32":
        flat_i = np.asarray(data).astype(np.int64).reshape(-1)
        per = 16
        lines = [", ".join(str(int(v)) for v in flat_i[k:k + per])
                 for k in range(0, len(flat_i), per)]
        return "\n".join("    " + ln + "," for ln in lines)
    flat = np.asarray(data, np.float32).reshape(-1)
    if not np.isfinite(flat).all():
        raise CompileError("a constant tensor holds NaN or infinity; weights and constants "
                           "must be finite")
    items = [format(float(v), ".9g") for v in flat]
    items = [s if any(ch in s for ch in ".e") else s + ".0" for s in items]
    lines = [", ".join(f"{s}f" for s in items[k:k + 8]) for k in range(0, len(items), 8)]
    return "\n".join("    " + ln + "," for ln in lines)


def _array(t: Tensor, recv: frozenset[str] = frozenset()) -> dict:
    sym, n = c_symbol(t), max(t.size, 1)
    ctype = C_TYPES[t.dtype]
    if t.name in recv:  # compiled-in values in flash, read through a pointer the link's
        # receive moves to the values it wrote (firmware/tt_checkpoint.c)
        return {"decl": f"static const {ctype} {sym}_image[{n}]", "data": _values(t.data, t.dtype),
                "initial": "", "pointer": f"static const {ctype} *{sym} = {sym}_image"}
    if in_flash(t):
        return {"decl": f"static const {ctype} {sym}[{n}]", "data": _values(t.data, t.dtype),
                "initial": ""}
    if t.kind == PARAM:  # trainable: SRAM copy, reset from a flash image by tt_init()
        return {"decl": f"static {ctype} {sym}[{n}] __attribute__((aligned(16)))", "data": "",
                "initial": f"static const {ctype} {sym}_init[{n}]",
                "initial_values": _values(t.data, t.dtype)}
    return {"decl": f"static {ctype} {sym}[{n}] __attribute__((aligned(16)))", "data": "",
            "initial": ""}


def _head(g: Graph, cg: CContext) -> str:
    out = g.meta.get("infer_output") or g.outputs[0]
    t = g.t(out)
    n = size(t.shape)
    if t.dtype == "s8":  # int8 models return real values: scale * (q - zero_point)
        assert t.quant is not None
        deq = (f"    tt_dequantize_s8(out, {cg.ptr(out)}, {n}, {c_float(t.quant.scale[0])}, "
               f"{t.quant.zero_point[0]});")
        act = g.meta.get("output_activation")  # an fp32 model's softmax head, quantised
        if act in ("softmax", "log_softmax"):
            deq += f"\n    tt_{act}_f32(out, out, {n});"
        return deq
    act = g.meta.get("output_activation")
    if act == "softmax":
        return f"    tt_softmax_f32(out, {cg.ptr(out)}, {n});"
    if act == "log_softmax":
        return f"    tt_log_softmax_f32(out, {cg.ptr(out)}, {n});"
    return f"    memcpy(out, {cg.ptr(out)}, sizeof(float) * {n});"


def _input_context(g: Graph, cg: CContext) -> dict:
    """How the sample enters: its C type, rows, and where they go (a whole arena buffer, or
    fetched row by row into a row-streamed stem's ring)."""
    t = g.t(g.inputs[0])
    rows = t.shape[0] if len(t.shape) == 3 else 1
    streamed = any(n.attrs.get("fetch") == t.name for n in g.nodes)
    ctx = {"input_ctype": C_TYPES[t.dtype], "input_int8": t.dtype == "s8",
           "input_rows": rows, "input_row_bytes": t.nbytes // rows, "input_bytes": t.nbytes,
           "input_streamed": streamed, "input_ptr": "" if streamed else cg.ptr(t.name)}
    if t.dtype == "s8":
        assert t.quant is not None
        ctx["input_scale"] = c_float(t.quant.scale[0])
        ctx["input_zero_point"] = int(t.quant.zero_point[0])
    return ctx


def model_id(g: Graph) -> int:
    """32 bits naming the model and its trainable layout, and its received tensors' when it
    has any (checkpoints and states check it)."""
    layout = [g.meta.get("model_sha256", ""),
              [(t.name, list(t.shape), t.dtype) for t in g.params(trainable=True)]]
    if received(g):  # builds without them keep the ids (and checkpoints) they had
        layout.append([(n, list(g.t(n).shape), g.t(n).dtype) for n in received(g)])
    return zlib.crc32(json.dumps(layout).encode())


def _phase(n) -> str:
    """A node's profile phase: a forward layer recomputed in the backward (passes/remat) is
    counted as "recompute"."""
    return "recompute" if n.attrs.get("remat_of") else n.phase


def profile_ops(g: Graph) -> list[dict[str, Any]]:
    """The op call sites counted by TT_PROFILE builds, in counter order, with their MACs."""
    def macs(n) -> int:
        return get_op(n.op).macs(n, [g.t(i).shape for i in n.inputs],
                                 [g.t(o).shape for o in n.outputs])

    return [{"name": n.name, "op": n.op, "phase": _phase(n), "macs": macs(n)} for n in g.nodes]


def profile_members(g: Graph) -> list[dict[str, Any]]:
    """The members of fused nodes (row and channel streams), in counter order after the
    nodes': counted in a `--profile-members` build (Options.profile_members), with their
    MACs and the fused node they run in."""
    out = []
    for n in g.nodes:
        sh = n.attrs.get("_shapes", {})
        for m in get_op(n.op).members(n):
            macs = get_op(m.op).macs(m, [sh.get(i, ()) for i in m.inputs],
                                     [sh.get(o, ()) for o in m.outputs])
            out.append({"name": m.name, "op": m.op, "parent": n.name, "phase": _phase(n),
                        "macs": macs})
    return out


def member_bases(members: list[dict[str, Any]], n_ops: int) -> dict[str, int]:
    """Fused node name -> the profile counter of its first member: the members' counters
    (profile_members) follow the nodes' one per node."""
    out: dict[str, int] = {}
    for k, m in enumerate(members):
        out.setdefault(m["parent"], n_ops + k)
    return out


KERNELS_JSON = "kernels.json"


def kernel_sites(g: Graph, cg: CContext) -> str:
    """kernels.json: each optimised kernel family the model calls, with its layers, the work
    they do per step (MACs, or output elements for an op without MACs) and the tables made
    for it alone; and the families kept generic."""
    ops = profile_ops(g)
    assert cg.opt_sites is not None and cg.table_bytes is not None

    def work(k: int) -> int:
        return max(ops[k]["macs"], sum(size(g.t(o).shape) for o in g.nodes[k].outputs))
    fams = {f: {"layers": [ops[k]["name"] for k in sorted(ks)],
                "work": sum(work(k) for k in ks),
                "table_bytes": cg.table_bytes.get(f, 0)}
            for f, ks in sorted(cg.opt_sites.items())}
    return json.dumps({"optimized": fams, "generic": sorted(cg.generic)}, indent=1) + "\n"


def render(g: Graph, plan: Plan, board: Board | str, kernels: str = "optimized",
           prefix: str = DEFAULT_PREFIX, generic: frozenset[str] = frozenset(),
           fp32_fma: bool = False) -> dict[str, str]:
    """Return {relative path: file text} for the whole generated project. `prefix` names the
    model's public C symbols (check_prefix); `generic` names the optimised kernel families
    kept generic to fit the board's flash (device/kernel_choice.py); `fp32_fma` fuses the
    channel-streamed 1x1 backward's multiply-adds (-DTT_F32_FMA=1, pipeline.fp32_fma)."""
    board = load_board(board) if isinstance(board, str) else board
    check_prefix(prefix)
    cg = CContext(g, plan, optimized=kernels == "optimized", prefix=prefix, generic=generic)
    members = profile_members(g)
    cg.member_base = member_bases(members, len(g.nodes))
    calls = {ph: [] for ph in ("forward", "loss", "backward", "update")}
    for k, n in enumerate(g.nodes):
        cg.node_index = k
        call = get_op(n.op).c_call(n, cg)
        calls[n.phase].append(f"/* {n.name} */ TT_OP_BEGIN(); {call} TT_OP_END({k});")
    trainable = [t for t in g.params(trainable=True)]
    label = next(t for t in g.tensors.values() if t.kind == "label")
    banner = (f"generated by tinytrain {__version__} from {g.meta.get('model_name')} "
              f"(sha256 {g.meta.get('model_sha256', '')[:16]}) for {board.name} - do not edit")
    ctx = {
        "banner": banner,
        "input_size": size(g.t(g.inputs[0]).shape),
        "output_size": size(g.t(g.meta.get("infer_output") or g.outputs[0]).shape),
        "target_size": size(label.shape),
        "target_bytes": label.nbytes,
        "loss": g.meta.get("loss", "ce"),
        "arena_size": plan.arena_size,
        "batch": g.meta.get("sgd", {}).get("batch", 1),
        "trainable": [{"name": t.name, "symbol": c_symbol(t), "size": t.size, "bytes": t.nbytes,
                       "dtype": t.dtype.upper()} for t in trainable],
        "trainable_bytes": sum(t.nbytes for t in trainable),
        "arrays": [_array(t, frozenset(received(g))) for t in persistent(g)],
        "received": [{"name": t.name, "symbol": c_symbol(t), "size": t.size, "bytes": t.nbytes,
                      "dtype": t.dtype.upper(), "ctype": C_TYPES[t.dtype]}
                     for t in map(g.t, received(g))],
        "received_bytes": sum(g.t(n).nbytes for n in received(g)),
        "zeroed": [c_symbol(t) for t in training_state(g)],
        "state": state_table(g),
        "state_bytes": sum(e.nbytes for e in state_table(g)),
        "forward": calls["forward"],
        "loss_calls": calls["loss"],
        "backward": calls["backward"],
        "model_id": model_id(g),
        "profile_ops": len(g.nodes) + len(members),
        "profile_members": bool(g.meta.get("count_members")),
        "update": calls["update"],
        **_input_context(g, cg),
        "step_counter": c_symbol(g.t("rng_step")) if "rng_step" in g.tensors else "",
        "target_ptr": cg.ptr(label.name),
        "pred_ptr": cg.ptr("pred"),
        "loss_ptr": cg.ptr("loss"),
        "head": _head(g, cg),
        **_library_context(g, prefix),
        "runtime_sources": [f"runtime/{n}" for n in runtime_files() if n.endswith(".c")],
        "target": HOST_BINARY,
        "firmware_sources": [f"firmware/{n}" for n in FIRMWARE_COMMON],
        "mcu": board.is_mcu,
        "board": board.name,
        "cc": board.cc,
        "cflags": board.cflags,
        "fp32_fma": fp32_fma,
    }
    if board.is_mcu:
        layout = flash_layout(g, board)
        ctx.update(slots=layout.slots, slot_bytes=layout.slot_bytes,
                   twin_slots=twin_layout(board, layout).slots,
                   twin_uart=board.qemu.uart_base if board.qemu else 0,
                   write_unit=board.flash_write_unit,
                   split_flash=len(layout.regions) > 1,
                   bin_images=_image_span(layout) <= (board.flash_bytes or 0))
    ctx["decls"] = cg.decls  # filled while the calls above were generated
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    files = {name: env.get_template(name + ".j2").render(**ctx)
             for name in ("model.h", "model.c", "Makefile")}
    files[KERNELS_JSON] = kernel_sites(g, cg)
    for name, p in runtime_files().items():
        files[f"runtime/{name}"] = p.read_text()
    for p in sorted(FIRMWARE.glob("*.[ch]")):
        if board.is_mcu and p.name.startswith("port_host"):
            continue
        files[f"firmware/{p.name}"] = p.read_text()
    if board.is_mcu:
        files.update(_board_files(board, env, banner, layout))
    return files


# The model's public names without their prefix (templates/model.h.j2): a build with another
# --prefix maps the tt_* spellings our firmware uses onto them under TT_MODEL_ALIASES.
API_NAMES = ("init", "train_step", "train_step_from", "apply_update", "infer", "infer_from",
             "skipped_steps", "trainable", "state", "received", "received_use", "set_lr",
             "set_momentum", "set_weight_decay",
             "get_lr", "get_momentum", "get_weight_decay", "input_t", "input_fn", "param_info",
             "profile_ticks")
API_MACROS = ("INPUT_SIZE", "INPUT_ROWS", "INPUT_ROW_BYTES", "INPUT_BYTES", "OUTPUT_SIZE",
              "TARGET_SIZE", "ARENA_SIZE", "BATCH", "TARGET_BYTES", "NUM_TRAINABLE",
              "TRAINABLE_BYTES", "NUM_STATE", "STATE_BYTES", "NUM_RECEIVED", "RECEIVED_BYTES",
              "MODEL_ID", "PROFILE_OPS",
              "DTYPE_F32", "DTYPE_S8", "DTYPE_S32", "DTYPE_U8",
              "INPUT_DTYPE", "INPUT_INT8", "BUILD_LR", "BUILD_MOMENTUM", "BUILD_WEIGHT_DECAY",
              "ERR_INPUT", "ERR_TARGET", "ERR_RANGE", "ERR_UNSUPPORTED")
INT8_INPUT_NAMES, INT8_INPUT_MACROS = ("quantize_input",), ("INPUT_SCALE", "INPUT_ZERO_POINT")


def api_aliases(prefix: str, input_int8: bool) -> list[tuple[str, str]]:
    """(tt_* name, prefixed name) for every public name of the model; empty for tt itself."""
    if prefix == DEFAULT_PREFIX:
        return []
    names = API_NAMES + (INT8_INPUT_NAMES if input_int8 else ())
    macros = API_MACROS + (INT8_INPUT_MACROS if input_int8 else ())
    up = prefix.upper()
    return ([(f"tt_{n}", f"{prefix}_{n}") for n in names]
            + [(f"TT_{m}", f"{up}_{m}") for m in macros])


def _short_float(v: float) -> str:
    """The shortest C float literal of v's float32 value (0.05f, not 0.05000000074505806f):
    parsed as a float it is that value exactly, as the option's value reads."""
    text = str(np.float32(v))
    return (text if any(ch in text for ch in ".e") else text + ".0") + "f"


def _library_context(g: Graph, prefix: str) -> dict[str, Any]:
    """Names and run-time SGD scalars of the model as a library (model.h/model.c)."""
    sgd = g.meta.get("sgd") or {}
    trainable = g.params(trainable=True)
    return {
        "prefix": prefix, "PREFIX": prefix.upper(), "header": "model.h", "hyper": HYPER,
        "aliases": api_aliases(prefix, g.t(g.inputs[0]).dtype == "s8"),
        "sgd_lr": _short_float(sgd.get("lr", 0.01)),
        "sgd_momentum": _short_float(sgd.get("momentum", 0.0)),
        "sgd_weight_decay": _short_float(sgd.get("weight_decay", 0.0)),
        # int8 parameters train with plain SGD; momentum needs the buffers only a build with
        # momentum allocates (passes/optimizer)
        "q8_updates": any(t.dtype in ("s8", "s32") for t in trainable),
        "has_momentum": any(t.kind == OPT_STATE and t.name.endswith("_momentum")
                            for t in g.tensors.values()),
        "adam": sgd.get("optimizer") == "adam",  # its moments are not SGD's momentum buffers
    }


# a received tensor's place in a checkpoint is padded to this (or the write unit, if larger):
# the kernels read it in place, so it starts 16-byte aligned (tt_checkpoint.h)
RECEIVED_ALIGN = 16


def checkpoint_entries(g: Graph) -> tuple[list[int], list[int]]:
    """The bytes of each entry a checkpoint can hold (tt_checkpoint.h): the received tensors
    (each padded to RECEIVED_ALIGN) and the trainable parameters, which every checkpoint
    holds, then the training state."""
    return received_entries([g.t(n).nbytes for n in received(g)]) + [
        t.nbytes for t in g.params(trainable=True)], [e.nbytes for e in state_table(g)]


def received_entries(nbytes: list[int]) -> list[int]:
    """Received tensors' bytes as the checkpoint pads them (to RECEIVED_ALIGN; a board's write
    unit, a power of two up to 32, then pads them no further or to itself)."""
    return [-(-n // RECEIVED_ALIGN) * RECEIVED_ALIGN for n in nbytes]


def flash_layout(g: Graph, board: Board) -> FlashLayout:
    """The board's checkpoint slots sized for this program's trainable parameters and its
    training state, or the parameters alone when the build had to give the state's flash to
    the program (g.meta["checkpoint_state"] False: device/build.py)."""
    params, state = checkpoint_entries(g)
    return board.checkpoint_layout(params, state if g.meta.get("checkpoint_state", True)
                                   else [])


def flash_layout_of_project(project: Path, board: Board) -> FlashLayout:
    """The flash layout a generated project was built with (from its program.json)."""
    info = json.loads((project / "program.json").read_text())
    size = {"f32": 4, "s32": 4, "s8": 1, "u8": 1}
    return board.checkpoint_layout(
        received_entries([int(np.prod(p["shape"])) * size[p["dtype"]]
                          for p in info.get("received", [])])
        + [int(np.prod(p.get("packed", {}).get("stored_shape") or p["shape"])) * size[p["dtype"]]
           for p in info["trainable"]],
        [int(np.prod(e["shape"])) * size[e["dtype"]] for e in info.get("state", [])]
        if info.get("checkpoint_state", True) else [])


def _image_span(layout: FlashLayout) -> int:
    """Bytes from the first program byte to the end of the last region or slot: what a .bin
    image (gaps filled) of the program would take."""
    ends = [o + n for o, n in layout.regions] + [s + layout.slot_bytes for s in layout.slots]
    return max(ends) - min(o for o, _ in layout.regions)


def twin_layout(board: Board, layout: FlashLayout) -> FlashLayout:
    """The same layout in the QEMU twin, whose code memory starts at the twin's flash_origin."""
    assert board.qemu is not None
    twin = layout.shifted(board.qemu.flash_origin - board.flash_base)
    (o, n), rest = twin.regions[0], twin.regions[1:]  # the twin boots from its origin (the
    start = board.qemu.flash_origin  # board's first bytes may belong to a bootloader's MBR)
    return FlashLayout(twin.slots, twin.slot_bytes, ((start, n + o - start), *rest))


def _board_files(board: Board, env: Environment, banner: str,
                 layout: FlashLayout) -> dict[str, str]:
    """The board layer, the QEMU twin's layer, startup code and the two linker scripts."""
    assert board.qemu is not None and board.sram_bytes
    ld = env.get_template("firmware.ld.j2")
    twin = twin_layout(board, layout)
    common = {"banner": banner, "ram_bytes": board.sram_bytes, "stack_bytes": board.stack_bytes}
    twin_ram = board.ram_origin if board.qemu.ram_origin is None else board.qemu.ram_origin

    def slots(lay: FlashLayout) -> str:
        return " and ".join(f"0x{a:08X}" for a in lay.slots) + f", {lay.slot_bytes} bytes each"
    return {
        "board/board.c": board.source_file(board.source).read_text(),
        "board/qemu_twin.c": (BOARDS_DIR / QEMU_SOURCE).read_text(),
        "board/startup.c": (BOARDS_DIR / "cortexm" / "startup.c").read_text(),
        "board/firmware.ld": ld.render(what=f"{board.name}", regions=layout.regions,
                                       slots=slots(layout), ram_origin=board.ram_origin,
                                       **common),
        "board/firmware_qemu.ld": ld.render(what=f"{board.name}'s QEMU twin "
                                            f"({board.qemu.machine})", regions=twin.regions,
                                            slots=slots(twin), ram_origin=twin_ram,
                                            **common),
    }


def write_files(files: dict[str, str], root: Path) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
