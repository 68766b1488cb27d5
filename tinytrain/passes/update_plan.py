"""Update plans: which parameters learn on the device (`--update`).

Forms: `full`, `bias` (every bias + the classifier), `last:K` (weights and biases of the last K
parameterised layers), `none`, `tte:n_bias=N,idx=I-J-K,ratio=R-S-T` (TTE's sparse-update
config), or a TOML file with either TTE's keys or a per-layer list.

Layers are the conv2d/dense nodes in forward order, indexed from the input (0-based, as TTE's
`manual_weight_idx`); a recurrent layer is two, its input projection (a 1x1 conv2d) and then
its recurrence (lstm/gru: R and Rb). A partial weight update trains the FIRST k input
channels: contiguous channels need no index map and no gather of scattered channels;
explicit channel lists are accepted in TOML for users who pick channels themselves (e.g. by
magnitude). For a depthwise
conv (groups = input channels = output channels) the channels are its channels: weight
channel c sees only input channel c and feeds only output channel c. Other grouped convs
(and depthwise ones with a channel multiplier) train their whole weight or none of it.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tinytrain.errors import OptionError
from tinytrain.ir import Graph, Node

LAYER_OPS = ("conv2d", "dense", "conv2d_q8", "dense_q8", "lstm", "gru")
# a recurrent layer's recurrence (R, Rb) is a layer of its own, after its input projection (a
# 1x1 conv with W, Wb): plans can train either, both, or neither
RECURRENT_OPS = ("lstm", "gru")


@dataclass(frozen=True)
class Layer:
    index: int
    node: Node
    weight: str
    bias: str | None
    in_channels: int  # the channels a partial update slices: per group, or a depthwise conv's
    source: str  # node name in the source model
    depthwise: bool = False  # groups = input channels = output channels (multiplier 1)

    @property
    def names(self) -> set[str]:
        return {self.node.name, self.source}


@dataclass(frozen=True)
class LayerUpdate:
    bias: bool = False
    weight: bool = False
    channels: tuple[int, ...] | None = None  # None: all input channels


@dataclass(frozen=True)
class UpdatePlan:
    spec: str
    layers: tuple[LayerUpdate, ...]  # one per Layer, same order


def is_depthwise(g: Graph, n: Node) -> bool:
    """A conv whose every group is one input and one output channel."""
    groups = n.attr("groups", 1)
    return (n.op in ("conv2d", "conv2d_q8") and groups > 1
            and groups == g.t(n.inputs[0]).shape[-1] == g.t(n.inputs[1]).shape[0])


def layers(g: Graph) -> list[Layer]:
    out = []
    for n in g.nodes:
        if n.phase == "forward" and n.op in LAYER_OPS:
            w = g.t(n.inputs[1])
            if w.source is not None and w.source.fixed:
                continue  # not the model's layer: an importer's folded normalisation
            src = w.source.node if w.source else n.name
            dw = is_depthwise(g, n)
            if n.op in RECURRENT_OPS:
                bias = n.inputs[2] if n.attr("bias") else None
            else:
                bias = n.inputs[2] if len(n.inputs) > 2 else None
            out.append(Layer(len(out), n, w.name, bias, w.shape[0] if dw else w.shape[-1], src,
                             dw))
    return out


def _channels_text(g: Graph, ly: Layer) -> str:
    groups = ly.node.attr("groups", 1)
    if ly.node.op in RECURRENT_OPS:
        return f"recurrence, hidden size {ly.in_channels}"
    if ly.depthwise:
        return f"{ly.in_channels} channels, depthwise"
    if groups != 1 and groups == g.t(ly.node.inputs[0]).shape[-1]:
        return f"depthwise, channel multiplier {g.t(ly.weight).shape[0] // groups}"
    if groups != 1:
        return f"{ly.in_channels} input channels per group, {groups} groups"
    return f"{ly.in_channels} input channels"


def describe_layers(g: Graph) -> str:
    rows = []
    for ly in layers(g):
        w = g.t(ly.weight)
        nb = g.t(ly.bias).size if ly.bias else 0
        rows.append(f"  {ly.index:3d}  {ly.source}  ({ly.node.op}, weight {list(w.shape)} = "
                    f"{w.size} values, bias {nb}, {_channels_text(g, ly)})")
    return "trainable layers (index from the input, name, shape):\n" + "\n".join(rows)


def _fail(g: Graph, msg: str) -> OptionError:
    return OptionError(f"invalid update plan: {msg}\n{describe_layers(g)}")


def _check_partial(g: Graph, ly: Layer) -> None:
    if ly.node.op in RECURRENT_OPS:
        raise _fail(g, f"layer {ly.index} ({ly.source}) is a recurrence (its R and Rb), which "
                       "trains whole or not at all; its input projection, the layer before "
                       "it, takes a partial update by input channel")
    groups = ly.node.attr("groups", 1)
    if groups != 1 and not ly.depthwise:
        kind = ("a depthwise conv with a channel multiplier" if groups == g.t(ly.node.inputs[0])
                .shape[-1] else f"a grouped conv ({groups} groups)")
        raise _fail(g, f"layer {ly.index} ({ly.source}) is {kind}; a partial channel update "
                       "needs a regular, pointwise or depthwise (multiplier 1) conv or a dense "
                       "layer: train its whole weight (ratio 1, weight = true) or none of it "
                       "(ratio 0)")


def _ratio_channels(g: Graph, ly: Layer, ratio: float) -> tuple[int, ...] | None:
    if not 0 < ratio <= 1:
        raise _fail(g, f"ratio {ratio} for layer {ly.index} is outside (0, 1]")
    if ratio == 1:
        return None
    _check_partial(g, ly)
    k = max(1, math.ceil(ratio * ly.in_channels))
    return tuple(range(k))


def _tte(g: Graph, lys: list[Layer], n_bias: int, idx: list[int], ratio: list[float],
         spec: str) -> UpdatePlan:
    if len(idx) != len(ratio):
        raise _fail(g, f"{len(idx)} weight indices but {len(ratio)} ratios")
    if not 0 <= n_bias <= len(lys):
        raise _fail(g, f"n_bias_update={n_bias} but the model has {len(lys)} layers")
    plan = [LayerUpdate() for _ in lys]
    for ly in lys[len(lys) - n_bias:]:
        plan[ly.index] = LayerUpdate(bias=True)
    for i, r in zip(idx, ratio):
        if not 0 <= i < len(lys):
            raise _fail(g, f"weight index {i} is out of range (0..{len(lys) - 1})")
        if r == 0:  # TTE's published schemes use ratio 0 for "no weight update here"
            continue
        plan[i] = LayerUpdate(bias=True, weight=True, channels=_ratio_channels(g, lys[i], r))
    plan[-1] = LayerUpdate(bias=True, weight=True)  # TTE always trains the classifier
    return UpdatePlan(spec, tuple(plan))


def _find(g: Graph, lys: list[Layer], entry: dict) -> Layer:
    if "index" in entry:
        i = entry["index"]
        if not isinstance(i, int) or not 0 <= i < len(lys):
            raise _fail(g, f"layer index {i!r} is out of range (0..{len(lys) - 1})")
        return lys[i]
    name = entry.get("name")
    for ly in lys:
        if name in ly.names:
            return ly
    raise _fail(g, f"unknown layer {name!r}")


def _from_toml(g: Graph, lys: list[Layer], path: Path) -> UpdatePlan:
    try:
        d = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise OptionError(f"cannot read update plan {path}: {e}") from None
    spec = f"toml:{path.name}"
    if "n_bias_update" in d or "manual_weight_idx" in d:
        return _tte(g, lys, int(d.get("n_bias_update", 0)), list(d.get("manual_weight_idx", [])),
                    [float(r) for r in d.get("weight_update_ratio",
                                             [1.0] * len(d.get("manual_weight_idx", [])))], spec)
    plan = [LayerUpdate() for _ in lys]
    for entry in d.get("layer", []):
        ly = _find(g, lys, entry)
        w = entry.get("weight", False)
        channels = None
        if isinstance(w, list):  # explicit input channels
            _check_partial(g, ly)
            if not w or any(not isinstance(c, int) or not 0 <= c < ly.in_channels for c in w):
                raise _fail(g, f"channels {w} of layer {ly.index} must be in "
                               f"0..{ly.in_channels - 1}")
            channels = tuple(sorted(set(w)))
            channels = None if len(channels) == ly.in_channels else channels
            w = True
        elif isinstance(w, (int, float)) and not isinstance(w, bool):
            channels = _ratio_channels(g, ly, float(w))
            w = True
        plan[ly.index] = LayerUpdate(bias=bool(entry.get("bias", w)), weight=bool(w),
                                     channels=channels)
    return UpdatePlan(spec, tuple(plan))


def parse_plan(g: Graph, spec: str) -> UpdatePlan:
    lys = layers(g)
    if spec == "full":
        return UpdatePlan(spec, tuple(LayerUpdate(True, True) for _ in lys))
    if spec == "none":
        return UpdatePlan(spec, tuple(LayerUpdate() for _ in lys))
    if spec == "bias":
        plan = [LayerUpdate(bias=True) for _ in lys]
        if lys:
            plan[-1] = LayerUpdate(True, True)
        return UpdatePlan(spec, tuple(plan))
    if spec.startswith("last:"):
        try:
            k = int(spec[5:])
        except ValueError:
            raise _fail(g, f"'{spec}': K must be an integer") from None
        if not 1 <= k <= len(lys):
            raise _fail(g, f"'{spec}': K must be in 1..{len(lys)}")
        return UpdatePlan(spec, tuple(LayerUpdate(i >= len(lys) - k, i >= len(lys) - k)
                                      for i in range(len(lys))))
    if spec.startswith("tte:"):
        fields = dict(kv.split("=", 1) for kv in spec[4:].split(",") if "=" in kv)
        try:
            idx = [int(v) for v in fields.get("idx", "").split("-") if v]
            ratio = [float(v) for v in fields.get("ratio", "").split("-") if v] or [1.0] * len(idx)
            n_bias = int(fields.get("n_bias", 0))
        except ValueError:
            raise _fail(g, f"cannot parse '{spec}'; expected "
                           "tte:n_bias=N,idx=I-J-K,ratio=R-S-T") from None
        return _tte(g, lys, n_bias, idx, ratio, spec)
    if spec.endswith(".toml"):
        return _from_toml(g, lys, Path(spec))
    if spec == "auto":  # resolved before compiling, by tinytrain.autoplan
        raise OptionError("--update auto is chosen by `tinytrain build` (with --data TRAIN.npz) "
                          "or tinytrain.autoplan.choose_plan, which pass the compiler its TOML "
                          "plan; compile_model itself takes a concrete plan")
    raise OptionError(f"unknown --update '{spec}'; use full, bias, last:K, none, "
                      "tte:n_bias=N,idx=I-J,ratio=R-S or a .toml file")


def _weight_value(ly: Layer, channels: tuple[int, ...] | None) -> str:
    """A partial weight as the ratio `--update` turns back into the same first-k channels when
    one does (readable), else as the exact channel list."""
    if channels is None:
        return "true"
    k = len(channels)
    if channels == tuple(range(k)):
        for text in (f"{k / ly.in_channels:.6g}", repr(k / ly.in_channels)):
            r = float(text)
            if 0 < r <= 1 and max(1, math.ceil(r * ly.in_channels)) == k:
                return text
    return "[" + ", ".join(map(str, channels)) + "]"


def plan_to_toml(g: Graph, plan: UpdatePlan, header: str = "") -> str:
    """The plan as the per-layer TOML `--update FILE.toml` reads back to the same plan. Layers
    are named when their name is unique (else indexed), with a comment saying what trains.
    `header` lines become comments at the top."""
    lys = layers(g)
    if len(plan.layers) != len(lys):
        raise ValueError(f"plan has {len(plan.layers)} layers, the graph {len(lys)}")
    lines = [f"# {h}" if h else "#" for h in header.splitlines()]
    for ly, up in zip(lys, plan.layers):
        if not (up.weight or (up.bias and ly.bias)):
            continue
        w = g.t(ly.weight)
        what = ("weight " + (f"{len(up.channels)}/{ly.in_channels} channels" if up.channels
                             else "whole") if up.weight else "bias only")
        unique = sum(ly.source in o.names for o in lys) == 1
        plain = ly.source.isprintable() and not set(ly.source) & {'"', "\\"}
        ident = f'name = "{ly.source}"' if unique and plain else f"index = {ly.index}"
        lines += ["", "[[layer]]", f"{ident}  # layer {ly.index}: {ly.node.op} "
                  f"{list(w.shape)}, {_channels_text(g, ly)}; trains {what}"]
        if up.weight:
            lines.append(f"weight = {_weight_value(ly, up.channels)}")
        lines.append(f"bias = {'true' if up.bias and ly.bias else 'false'}")
    return "\n".join(lines).lstrip("\n") + "\n"
