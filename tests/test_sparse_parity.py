"""Sparse update plans (`--update`) against PyTorch, step for step, through the CLI.

The reference is plain torch.optim.SGD with every frozen parameter's requires_grad=False and,
for a partial-channel weight, the gradient of the untrained input channels zeroed after
backward() and before step(): their momentum buffers then stay 0 and they never move. A
depthwise conv's channels are its weight's axis 0 (PyTorch's (C, 1, kh, kw)); their gradient
is zeroed by a hook. Per-step
losses and the trained weights must match; the untrained channel slices of partially trained
weights must be bit-identical to their initial values, and frozen parameters must not be
trainable state of the program at all (they live in flash).

The expected plans are written out here by layer index (conv/dense nodes in forward order,
from the input) rather than derived with tinytrain.passes.update_plan, so the plan parser is tested
too: program.json's trainable set and partial channels must equal what is written here.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch")
from sklearn.datasets import load_digits  # noqa: E402

from tests.test_torch_parity import torch_train  # noqa: E402
from tests.torch_models import DigitsCNN, TinyMobileNet, export  # noqa: E402
from tinytrain.device.state_file import read as read_saved  # noqa: E402

LOSS_RTOL = 1e-4  # per-step loss within 1e-4 relative (fp32 sums reordered)
WEIGHT_ATOL = 1e-4  # final trained weights; fp32 accumulation order differs
STEPS = 24  # optimizer steps compared (>= 20)

# TTE-style spec on TinyMobileNet (16 layers; see the layer table in `tinytrain build` errors):
# biases of the last 6 layers (10..15); weights of layer 8 (SE reduce 24 -> 6, ratio 0.3:
# ceil(7.2) = 8 input channels), layer 10 (project 24 -> 12, half: 12 channels), layer 13
# (project 24 -> 12, a quarter: 6 channels); layer 14 (head 12 -> 24) has ratio 0, so bias
# only; the classifier (15) is always trained in full.
TTE = "tte:n_bias=6,idx=8-10-13-14,ratio=0.3-0.5-0.25-0"
TTE_WEIGHTS = {8: list(range(8)), 10: list(range(12)), 13: list(range(6)), 15: None}
TTE_BIASES = {8, 10, 11, 12, 13, 14, 15}

# Explicit per-layer plan on DigitsCNN (layers: 0 stem, 1 depthwise, 2 pointwise, 3 down, 4 fc).
TOML_PLAN = """
[[layer]]
name = "/pw/Conv"        # pointwise 8 -> 8: three scattered input channels, no bias
weight = [5, 0, 2]
bias = false

[[layer]]
index = 1                # depthwise: bias only
bias = true

[[layer]]
index = 3                # regular 3x3 conv 8 -> 16: input channels 1 and 6 (+ its bias)
weight = [6, 1]

[[layer]]
index = 4                # classifier: the first half of its 16 inputs (+ its bias)
weight = 0.5
"""


# Depthwise partial updates on TinyMobileNet: layer 7 (depthwise 24, stride 2, a quarter: 6
# channels), layer 12 (depthwise 24, stride 1, half: 12 channels), layer 13 (project 24 -> 12,
# a quarter: 6 input channels); biases of the last 4 layers (12..15) and of the weight-trained
# layer 7; the classifier in full.
TTE_DW = "tte:n_bias=4,idx=7-12-13,ratio=0.25-0.5-0.25"
TTE_DW_WEIGHTS = {7: list(range(6)), 12: list(range(12)), 13: list(range(6)), 15: None}
TTE_DW_BIASES = {7, 12, 13, 14, 15}

# DigitsCNN's depthwise conv with scattered channels (batch: the unfused gradient + row SGD).
DW_TOML_PLAN = """
[[layer]]
name = "/dw/Conv"        # depthwise 8 channels: channels 1, 4 and 6 (+ its bias)
weight = [6, 1, 4]

[[layer]]
index = 4                # classifier
weight = true
"""


class Branch(torch.nn.Module):
    """Two pointwise convs reading one activation (layers: 0 stem, 1 a, 2 b, 3 fc)."""

    input_shape = (1, 8, 8)

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.a = torch.nn.Conv2d(8, 4, 1)
        self.b = torch.nn.Conv2d(8, 4, 1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = torch.cat([self.a(h), torch.nn.functional.hardswish(self.b(h))], 1)
        return self.fc(torch.flatten(h.mean(dim=(2, 3)), 1))


BRANCH_PLAN = """
[[layer]]
index = 1
weight = [0, 2, 5]
bias = false

[[layer]]
index = 2
weight = [1, 3, 4]
bias = false

[[layer]]
index = 3
weight = [0, 1, 6]
bias = false
"""


@dataclass(frozen=True)
class Case:
    model: type
    update: str  # --update value; "@toml": a file holding `toml`
    batch: int
    lr: float
    momentum: float
    wd: float
    weights: dict[int, list[int] | None]  # layer -> trained input channels (None: all)
    biases: set[int] = field(default_factory=set)
    toml: str = ""
    optimizer: str = "sgd"  # --optimizer (adam: PyTorch's defaults for betas and eps)


CASES = {
    # every bias + the classifier weight; batch 1 (fused updates)
    "cnn_bias_b1": Case(DigitsCNN, "bias", 1, 0.05, 0.0, 0.0, {4: None}, {0, 1, 2, 3, 4}),
    # last two layers in full; batch 4 with momentum and weight decay: with requires_grad=False
    # PyTorch skips frozen parameters entirely (grad is None), so decay applies to trained
    # parameters only, as in tinytrain
    "mobilenet_last2_b4": Case(TinyMobileNet, "last:2", 4, 0.05, 0.9, 1e-3,
                               {14: None, 15: None}, {14, 15}),
    # TTE sparse update, batch 1 with momentum: fused partial-channel updates
    "mobilenet_tte_b1": Case(TinyMobileNet, TTE, 1, 0.02, 0.9, 0.0, TTE_WEIGHTS, TTE_BIASES),
    # explicit channel lists, batch 4, momentum 0.9. Weight decay must be 0 whenever a weight
    # is partially trained: PyTorch's SGD adds wd * p to the gradient AFTER our masking of the
    # untrained channels' gradients, so it would decay (move) the frozen channels, while
    # tinytrain never touches them (it has no optimizer state or update for them at all).
    "cnn_toml_b4": Case(DigitsCNN, "@toml", 4, 0.1, 0.9, 0.0,
                        {2: [0, 2, 5], 3: [1, 6], 4: list(range(8))}, {1, 3, 4}, TOML_PLAN),
    # two layers reading the same activation with different (same-size) channel sets: each
    # needs its own gather of the saved input
    "branch_toml_b1": Case(Branch, "@toml", 1, 0.1, 0.9, 0.0,
                           {1: [0, 2, 5], 2: [1, 3, 4], 3: [0, 1, 6]}, set(), BRANCH_PLAN),
    # depthwise partial updates (first k channels), batch 1 with momentum: fused kernels that
    # read the first k channels of the whole output gradient
    "mobilenet_dw_tte_b1": Case(TinyMobileNet, TTE_DW, 1, 0.02, 0.9, 0.0, TTE_DW_WEIGHTS,
                                TTE_DW_BIASES),
    # depthwise channel list, batch 4 with momentum: accumulated gradient, then row updates
    "cnn_dw_toml_b4": Case(DigitsCNN, "@toml", 4, 0.1, 0.9, 0.0, {1: [1, 4, 6], 4: None},
                           {1, 4}, DW_TOML_PLAN),
    # Adam (never fused: its moments need the whole gradient): whole tensors with weight
    # decay at batch 4, input channels at batch 1, a depthwise weight's rows at batch 4
    "mobilenet_adam_last2_b4": Case(TinyMobileNet, "last:2", 4, 0.01, 0.0, 1e-3,
                                    {14: None, 15: None}, {14, 15}, optimizer="adam"),
    "mobilenet_adam_tte_b1": Case(TinyMobileNet, TTE, 1, 0.005, 0.0, 0.0, TTE_WEIGHTS,
                                  TTE_BIASES, optimizer="adam"),
    "cnn_adam_dw_toml_b4": Case(DigitsCNN, "@toml", 4, 0.01, 0.0, 0.0, {1: [1, 4, 6], 4: None},
                                {1, 4}, DW_TOML_PLAN, optimizer="adam"),
}


def digits(model_cls, n):
    d = load_digits()
    x = (d.images[:n] / 16.0).astype(np.float32)
    return x.reshape((n, *model_cls.input_shape)), d.target[:n].astype(np.int64)


def depthwise_weights(onnx_model) -> set[str]:
    """Weights of the depthwise Convs (group = channels, multiplier 1): their trained channels
    are axis 0 of the weight, not axis 1."""
    dims = {t.name: tuple(t.dims) for t in onnx_model.graph.initializer}
    out = set()
    for n in onnx_model.graph.node:
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        if n.op_type == "Conv" and group > 1 and dims[n.input[1]][:2] == (group, 1):
            out.add(n.input[1])
    return out


def onnx_layers(onnx_model):
    """(node name, weight name, bias name) of the Conv/Gemm nodes in forward order: the
    layer numbering of --update. The weight/bias names are the torch parameter names."""
    return [(n.name, n.input[1], n.input[2] if len(n.input) > 2 else None)
            for n in onnx_model.graph.node if n.op_type in ("Conv", "Gemm")]


def to_torch_layout(a):
    return a.transpose(0, 3, 1, 2) if a.ndim == 4 else a  # conv OHWI -> OIHW; dense as is


def reference(model, case, masks, x, y):
    """Frozen params have requires_grad=False (set by the caller); `masks` lists (partially
    trained parameter, its untrained channels, their axis), whose gradients are zeroed."""
    hooks = []
    for p, untrained, axis in masks:
        if axis == 0:  # depthwise: zero the untrained channels' rows as the gradient arrives
            rows = torch.tensor(untrained, dtype=torch.long)
            hooks.append(p.register_hook(lambda gr, rows=rows: gr.index_fill(0, rows, 0.0)))
    try:
        return torch_train(model, x, y, case.batch, case.lr, case.momentum, case.wd,
                           [(p, u) for p, u, axis in masks if axis == 1], case.optimizer)
    finally:
        for h in hooks:
            h.remove()


def build_and_run(cli, tmp_path, case, *extra):
    """Export a seeded model, build and run it.
    Returns (torch model, onnx path, build dir, per-step losses, (x, y))."""
    torch.manual_seed(0)
    model = case.model()
    onnx_path = tmp_path / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter is what we want
        export(model, onnx_path)
    update = case.update
    if update == "@toml":
        update = tmp_path / "plan.toml"
        update.write_text(case.toml)
    x, y = digits(case.model, STEPS * case.batch)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    build = tmp_path / "build"
    cli("build", onnx_path, "--out", build, "--update", update, "--lr", case.lr,
        "--momentum", case.momentum, "--weight-decay", case.wd, "--batch", case.batch,
        "--optimizer", case.optimizer, *extra)
    cli("run", build, "--data", tmp_path / "train.npz", "--metrics", tmp_path / "m.jsonl",
        "--save", tmp_path / "state.npz")
    losses = np.array([json.loads(line)["loss"] for line in open(tmp_path / "m.jsonl")])
    return model, onnx_path, build, losses, (x, y)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sparse_update_matches_pytorch(name, tmp_path, cli):
    case = CASES[name]
    model, onnx_path, build, ours, (x, y) = build_and_run(cli, tmp_path, case)
    lys = onnx_layers(onnx.load(str(onnx_path)))
    dw = depthwise_weights(onnx.load(str(onnx_path)))
    params = dict(model.named_parameters())
    initial = {k: v.detach().numpy().copy() for k, v in params.items()}

    trained: dict[str, list[int] | None] = {}  # torch name -> trained input channels
    for i, channels in case.weights.items():
        trained[lys[i][1]] = channels
    for i in case.biases:
        trained[lys[i][2]] = None
    for k, p in params.items():
        p.requires_grad_(k in trained)
    masks = []
    axis = {k: 0 if k in dw else 1 for k in trained}  # the axis of a weight's channels
    for k, channels in trained.items():
        if channels is not None:
            untrained = sorted(set(range(params[k].shape[axis[k]])) - set(channels))
            masks.append((params[k], untrained, axis[k]))
    model.train()
    ref = reference(model, case, masks, x, y)

    # the program trains exactly the planned parameters, with the planned channels
    info = json.loads((build / "program.json").read_text())
    node_params = {node: (w, b) for node, w, b in lys}
    ours_to_torch = {}
    for p in info["trainable"]:
        w, b = node_params[p["source"]["node"]]
        ours_to_torch[p["name"]] = w if p["source"]["slot"] == "weight" else b
    assert sorted(ours_to_torch.values()) == sorted(trained)
    partial = {ours_to_torch[k]: v for k, v in info["partial_channels"].items()}
    assert partial == {k: v for k, v in trained.items() if v is not None}

    assert len(ours) == len(ref) == STEPS * case.batch
    np.testing.assert_allclose(ours, ref, rtol=LOSS_RTOL, atol=0)

    state = read_saved(tmp_path / "state.npz").params
    assert sorted(state) == sorted(ours_to_torch)  # frozen params are not program state
    moved = 0.0
    for ours_name, torch_name in ours_to_torch.items():
        mine = to_torch_layout(state[ours_name])
        theirs = params[torch_name].detach().numpy()
        np.testing.assert_allclose(mine, theirs, atol=WEIGHT_ATOL, rtol=0, err_msg=torch_name)
        channels = trained[torch_name]
        if channels is not None:
            ax, first = axis[torch_name], initial[torch_name]
            untrained = sorted(set(range(mine.shape[ax])) - set(channels))
            np.testing.assert_array_equal(mine.take(untrained, ax), first.take(untrained, ax),
                                          err_msg=f"{torch_name}: untrained channels moved")
            np.testing.assert_array_equal(theirs.take(untrained, ax), first.take(untrained, ax))
            moved = max(moved, float(np.abs(mine.take(channels, ax)
                                            - first.take(channels, ax)).max()))
        else:
            moved = max(moved, float(np.abs(mine - initial[torch_name]).max()))
    for k, p in params.items():  # the reference really froze what the plan freezes
        if k not in trained:
            np.testing.assert_array_equal(p.detach().numpy(), initial[k], err_msg=k)
    assert moved > 100 * WEIGHT_ATOL  # training really changed the trained weights


@pytest.mark.parametrize("name", ["mobilenet_tte_b1", "branch_toml_b1", "mobilenet_dw_tte_b1"])
def test_memory_passes_do_not_change_numerics(name, tmp_path, cli):
    """Batch-1 sparse plans, where the updates fuse into the backward pass: the default build
    (fuse, masks, schedule, in-place) and --no-memory-passes give identical numbers."""
    case = CASES[name]
    assert case.batch == 1
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, _, build_a, fast, _ = build_and_run(cli, tmp_path / "a", case)
    _, _, build_b, plain, _ = build_and_run(cli, tmp_path / "b", case, "--no-memory-passes")
    assert json.loads((build_a / "program.json").read_text()).get("fused")  # the passes ran
    assert not json.loads((build_b / "program.json").read_text()).get("fused")
    assert len(fast) == len(plain) == STEPS
    assert fast.tolist() == plain.tolist()  # exact: the passes must not change a single bit
    a, b = (read_saved(tmp_path / d / "state.npz").params for d in "ab")
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
