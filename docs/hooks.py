"""MkDocs hook: the reference pages' generated parts, made from the code at every build.

A page holds a marker such as `<!-- generated: cli -->`; `on_page_markdown` replaces it with
Markdown made from the live objects (the Typer app, the op registry and the importers' handler
tables, the board files), so the reference cannot drift from the code. Hand-written text around
a marker stays in the page source.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Importable from a plain checkout too, not only from an installed (or editable) package.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_CODE_SPAN = re.compile(r"(`[^`]*`)")


def _md(text: str) -> str:
    """Help text as Markdown: one paragraph, Markdown's own characters escaped outside code
    spans (help strings are plain text and may hold `*`, `<`, `|` or `_`)."""
    text = " ".join(inspect.cleandoc(text).split())
    parts = _CODE_SPAN.split(text)
    for k in range(0, len(parts), 2):
        parts[k] = re.sub(r"([\\*_<>|\[\]])", r"\\\1", parts[k])
    return "".join(parts)


# ---- the command line ----------------------------------------------------------------------

def _commands(cmd: Any, ctx: Any) -> Iterator[tuple[Any, Any]]:
    """Every command under `cmd` (itself first), depth first, with its click Context."""
    import click

    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, click.Context(sub, info_name=name, parent=ctx))


def _param_line(p: Any, ctx: Any) -> str:
    names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    if p.param_type_name == "argument":
        names = f"`{p.make_metavar(ctx)}`"
    elif not getattr(p, "is_flag", False):
        names += f" `{p.make_metavar(ctx)}`"
    facts = []
    if p.required:
        facts.append("required")
    elif p.param_type_name == "argument":
        facts.append("optional")
    default = p.default
    unset = default is None or type(default).__name__ == "Sentinel" or default in ((), [])
    if getattr(p, "is_flag", False):
        if p.secondary_opts:  # --x/--no-x: name the one in force
            facts.append(f"default `{p.opts[0] if default else p.secondary_opts[0]}`")
    elif not p.required and not unset and not callable(default):
        facts.append(f"default `{default}`")
    describe = getattr(p.type, "_describe_range", None)  # click's IntRange/FloatRange
    if describe is not None:
        facts.append(f"`{describe()}`")
    if getattr(p, "multiple", False):
        facts.append("repeatable")
    help_text = _md(getattr(p, "help", None) or "")
    return f"- {names}" + (f" ({', '.join(facts)})" if facts else "") + \
        (f": {help_text}" if help_text else "")


def _epilog(epilog: str) -> list[str]:
    """The epilog's paragraphs: an "Examples:" paragraph as a verbatim shell block, the others
    (such as `run`'s note on Ctrl-C) as text."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", textwrap.dedent(epilog).strip("\n")):
        lines = para.splitlines()
        if lines and lines[0].strip() == "Examples:":
            out += ["Examples:", "", "```sh", *textwrap.dedent("\n".join(lines[1:])).splitlines(),
                    "```", ""]
        elif para.strip():
            out += [_md(para), ""]
    return out


def cli_markdown() -> str:
    """Every command of `tinytrain` (Typer app tinytrain.cli.main:app), its usage, help text,
    arguments and options grouped as `--help` groups them, and its examples."""
    import click
    import typer

    from tinytrain.cli.help import OTHER
    from tinytrain.cli.main import app

    root = typer.main.get_command(app)
    out: list[str] = []
    for cmd, ctx in _commands(root, click.Context(root, info_name="tinytrain")):
        path = ctx.command_path
        level = "#" * min(2 + path.count(" "), 4)
        out += [f"{level} {path}", ""]
        out += ["```text", f"{path} {' '.join(cmd.collect_usage_pieces(ctx))}", "```", ""]
        if cmd.help:
            out += [_md(cmd.help), ""]
        if isinstance(cmd, click.Group):
            subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
            out += ["| command | what it does |", "|---|---|"]
            out += [f"| [`{path} {n}`](#{(path + ' ' + n).replace(' ', '-')}) | "
                    f"{_md(s.get_short_help_str(limit=300))} |" for n, s in subs]
            out.append("")
        params = [p for p in cmd.get_params(ctx)]
        args = [p for p in params if p.param_type_name == "argument"]
        groups: dict[str, list[Any]] = {}
        for p in params:
            if p.param_type_name != "argument":
                groups.setdefault(getattr(p, "rich_help_panel", None) or OTHER, []).append(p)
        if args:
            out += ["**Arguments**", "", *(_param_line(p, ctx) for p in args), ""]
        for title in sorted(groups, key=lambda t: t == OTHER):  # as GroupedCommand orders them
            out += [f"**{title}**", "", *(_param_line(p, ctx) for p in groups[title]), ""]
        if cmd.epilog:
            out += _epilog(cmd.epilog)
    return "\n".join(out)


# ---- ops -----------------------------------------------------------------------------------

def _base(source: str) -> str:
    """'CONV_2D (int8)' -> 'CONV_2D': the op name a source entry of the registry names."""
    return source.removeprefix("onnx:").split(" (")[0].strip()


def _overrides(op: Any, method: str) -> bool:
    from tinytrain.ops import OpDef

    return getattr(type(op), method) is not getattr(OpDef, method)


def ops_markdown() -> str:
    """The IR ops from the registry (tinytrain.ops.REGISTRY) and, for each ONNX and TFLite op
    the importers handle (their handler tables), the IR ops it becomes."""
    from tinytrain.frontend import tflite_float, tflite_ops, tflite_shape
    from tinytrain.frontend.onnx_import import handlers as onnx_handlers
    from tinytrain.frontend.onnx_ops import FOLDED
    from tinytrain.frontend.tflite_import import OP_NAMES
    from tinytrain.ops import REGISTRY, public_ops

    tflite_names = set(tflite_ops.SUPPORTED)
    public = sorted(public_ops(), key=lambda o: o.name)

    def is_tflite(src: str) -> bool:  # TFLite's builtin operators are named in capitals
        if src.startswith("onnx:"):  # a name both formats use, here ONNX's (LSTM)
            return False
        return _base(src) in tflite_names or _base(src).isupper()

    def bases(op: Any) -> set[str]:
        return {_base(s) for s in op.source_ops}

    rows = ["| IR op | from ONNX | from TFLite | forward (numpy reference + C call) | "
            "backward (gradient rule) | int8 |", "|---|---|---|---|---|---|"]
    for op in public:
        onnx = [s.removeprefix("onnx:") for s in op.source_ops if not is_tflite(s)]
        tfl = [s for s in op.source_ops if is_tflite(s)]
        fwd = "yes" if _overrides(op, "forward") and _overrides(op, "c_call") else "no"
        if op.has_gradient and _overrides(op, "gradient"):
            bwd = "yes"
        else:
            bwd = "no: inference head, folded into the loss"
        # an int8 op's float counterpart (or the reverse) imports from the same source op
        twins = sorted(o.name for o in public if o is not op
                       and o.name.endswith("_q8") != op.name.endswith("_q8")
                       and (bases(o) & bases(op) or o.name == f"{op.name}_q8"))
        if op.name.endswith("_q8"):
            q8 = "int8 (TFLite's integer arithmetic; fp32 backward)" + (
                f"; fp32: {', '.join(f'`{t}`' for t in twins)}" if twins else "")
        else:
            q8 = ", ".join(f"`{t}`" for t in twins) or "—"
        rows.append(f"| `{op.name}` | {_md(', '.join(onnx)) or '—'} | "
                    f"{_md(', '.join(tfl)) or '—'} | {fwd} | {bwd} | {q8} |")

    def targets(name: str, handler: Any, int8: bool | None = None) -> str:
        """The IR ops that list `name` as a source (for a TFLite operator, those of its type:
        the `*_q8` ops of an int8 model where there are any, the others of a float one);
        else what its handler's docstring says it does (TFLite's TRANSPOSE: a relabel of the
        input layout)."""
        hit = sorted({o.name for o in public if name in bases(o)})
        if int8 is not None:
            typed = [h for h in hit if h.endswith("_q8") == int8]
            hit = typed if typed or not int8 else hit
        if hit:
            return ", ".join(f"`{h}`" for h in hit)
        if handler is not None and handler.__doc__:
            return f"no op of its own (the importer's handler: {_md(handler.__doc__)})"
        return "no op of its own: removed, or folded into the ops around it, by the importer"

    onnx_table = onnx_handlers()
    src_rows = ["| source op | format | IR op(s) |", "|---|---|---|"]
    for name in sorted(set(onnx_table) | set(FOLDED)):
        what = targets(name, onnx_table.get(name))
        if name in FOLDED:
            what = (what + "; " if name in onnx_table else "") + \
                "evaluated at compile time on constants (shape arithmetic)"
        src_rows.append(f"| {name} | ONNX | {what} |")
    # TFLite: an operator's handler depends on its tensors' type (tflite_import.handler): the
    # int8 table, the float table (Keras's default export), and shape arithmetic for either
    for fmt, table, int8 in (("TFLite (int8)", tflite_ops.HANDLERS, True),
                             ("TFLite (float)", tflite_float.FLOAT_HANDLERS, False)):
        for code, handler in table.items():
            name = OP_NAMES[code]
            # PADV2 has PAD's handler and IR op; the registry names PAD only
            same = [name] + [OP_NAMES[c] for c, h in table.items() if h is handler]
            hits = [t for t in (targets(n, None, int8) for n in same) if t.startswith("`")]
            what = hits[0] if hits else targets(name, handler, int8)
            if hits and handler is tflite_float.binary:
                what += ("; with a per-channel constant, a frozen 1×1 depthwise `conv2d` (a "
                         "normalisation's mean and scale, never trained)")
            if hits and code in tflite_float.FOLD:
                what += "; evaluated at import when every input is constant"
            src_rows.append(f"| {name} | {fmt} | {what} |")
    for code in tflite_shape.SHAPE_HANDLERS:
        src_rows.append(f"| {OP_NAMES[code]} | TFLite (shapes) | no op of its own: evaluated "
                        "at import on constant shapes, in a model of either type (a Keras "
                        "Flatten with a dynamic batch computes its RESHAPE's target this way) |")

    internal: dict[str, list[str]] = {}
    for name, op in sorted(REGISTRY.items()):
        if not op.public:
            internal.setdefault(type(op).__module__.rsplit(".", 1)[-1], []).append(f"`{name}`")
    int_rows = ["| op file (`tinytrain/ops/`) | internal ops |", "|---|---|"]
    int_rows += [f"| `{m}.py` | {', '.join(v)} |" for m, v in sorted(internal.items())]

    return "\n".join([
        f"The registry holds {len(REGISTRY)} ops: {len(public)} forward ops that models "
        f"import to, and {len(REGISTRY) - len(public)} backward, update and fused ops that "
        "autodiff and the memory passes emit.", "",
        "### IR ops", "", *rows, "",
        "### Source ops", "",
        "Every op the importers accept (`tinytrain/frontend/onnx_ops.py`, `onnx_qdq.py`, "
        "`tflite_ops.py` for int8 TFLite operators, `tflite_float.py` for float ones and "
        "`tflite_shape.py` for shape arithmetic register a handler per op) and the IR ops it "
        "becomes.", "",
        *src_rows, "",
        "### Internal ops", "",
        "Not imported from a model: made by autodiff (`*_backward*`), the optimizer "
        "(`*_sgd*`) and the memory passes (streams, masks, partial channels).", "",
        *int_rows, ""])


# ---- boards --------------------------------------------------------------------------------

def boards_markdown() -> str:
    """One row per board file (boards/*.toml), read through tinytrain.boards."""
    from tinytrain.boards import available, load_board

    def kb(n: int | None) -> str:
        return f"{n // 1024:,} KB" if n else "unlimited"

    rows = ["| board | description | core | clock | SRAM | flash | stack reserve | "
            "QEMU twin | flashing |", "|---|---|---|---|---|---|---|---|---|"]
    flags = ["| board | compiler | flags | board layer |", "|---|---|---|---|"]
    erase = ["| board | flash erase map | checkpoint slots and program for 10 KB trained |",
             "|---|---|---|"]
    for name in available():
        b = load_board(name)
        flash = kb(b.flash_bytes) if b.is_mcu else "unlimited"
        proto = b.flash.get("protocol", "—")
        extra = [f"{k} `{b.flash[k]:#x}`" if isinstance(b.flash[k], int) and k != "baud"
                 else f"{k} `{b.flash[k]}`" for k in ("product_id", "uf2_family", "baud")
                 if k in b.flash]
        flashing = f"`{proto}`" + (f" ({', '.join(extra)})" if extra else "")
        twin = f"`{b.qemu.machine}`" if b.qemu else "—"
        rows.append(f"| `{b.name}` | {_md(b.description)} | {b.cpu} | "
                    f"{f'{b.clock_hz // 10**6} MHz' if b.clock_hz else '—'} | "
                    f"{kb(b.sram_bytes)} | {flash} | "
                    f"{kb(b.stack_bytes) if b.stack_bytes else '—'} | {twin} | "
                    f"{flashing if b.is_mcu else '—'} |")
        flags.append(f"| `{b.name}` | `{b.cc}` | {' '.join(f'`{f}`' for f in b.cflags) or '—'}"
                     f" | {f'`boards/{b.source}`' if b.source else '—'} |")
        if b.is_mcu:
            if b.flash_sectors:
                emap = "sectors " + ", ".join(f"{s // 1024}" for s in b.flash_sectors) + " KB"
            else:
                emap = f"uniform {b.flash_page_bytes // 1024} KB pages up to `{b.flash_end:#x}`"
            lay = b.flash_layout(10 << 10)
            slots = ", ".join(f"`{a:#x}`" for a in lay.slots)
            erase.append(f"| `{b.name}` | {emap} (write unit {b.flash_write_unit} B) | "
                         f"two {lay.slot_bytes // 1024} KB slots at {slots}; program "
                         f"{lay.program_bytes // 1024:,} KB |")
    return "\n".join([*rows, "", "### Toolchain", "", *flags, "", "### Flash", "", *erase, ""])


GENERATED: dict[str, Callable[[], str]] = {
    "<!-- generated: cli -->": cli_markdown,
    "<!-- generated: ops -->": ops_markdown,
    "<!-- generated: boards -->": boards_markdown,
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    for marker, make in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
