"""Write the time-series example: three small activity classifiers pretrained on BasicMotions
(a smartwatch's accelerometer and gyroscope, 4 activities) and the data of a re-mounted sensor
for them to adapt to on the device.

    python examples/timeseries/make_models.py [OUT_DIR]     # default: examples/timeseries

BasicMotions ships inside the `aeon` wheel (aeon/datasets/data/BasicMotions/*.ts), so nothing
is downloaded: `pip install --no-deps aeon==1.6.0` is enough, since this script reads the two
.ts files itself and never imports aeon (its loader would pull in pandas and numba). Needs
PyTorch (the `test` extra). Runs in about half a minute on a laptop's CPU.

What it writes (README.md beside this script says more):

- `conv1d.onnx`, `gru.onnx`, `lstm.onnx`: the three models, pretrained on the sensor as mounted;
- `conv1d_train.npz`, `conv1d_test.npz`: the re-mounted sensor's windows, x (N, 6, 50) as
  nn.Conv1d takes them, y class ids; `train` for adapting on the device, `test` held out;
- `rnn_train.npz`, `rnn_test.npz`: the same windows as (N, 50, 6), as nn.GRU/nn.LSTM with
  batch_first=True take them.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
STEPS = 50  # window length: 5 s of the watch's 10 Hz samples
STRIDE = 10  # 6 overlapping windows per 10 s recording
HIDDEN = 32  # the GRU's and LSTM's state
ADAPT_PER_CLASS = 5  # of each class's 10 test recordings: 5 to adapt on, 5 held out
ROTATION_DEG = 90.0  # the re-mounted sensor: turned a quarter turn about its z axis
PRETRAIN_EPOCHS = 60
# The device's adaptation, mirrored in PyTorch for the README: plain SGD, batch 1.
ADAPT_LR, ADAPT_EPOCHS, ADAPT_SEED = 0.02, 5, 1


def aeon_data_dir() -> Path:
    """BasicMotions inside the installed aeon package, found without importing aeon."""
    spec = importlib.util.find_spec("aeon")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("aeon is not installed: pip install --no-deps aeon==1.6.0 (the data ships in "
                 "its wheel), or pass --data-dir with BasicMotions_TRAIN.ts and _TEST.ts")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets/data/BasicMotions"


def read_ts(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """An equal-length, multivariate .ts file without timestamps or missing values (as
    BasicMotions is): x (N, channels, steps), y class ids in the @classLabel order."""
    classes: list[str] = []
    xs, ys, in_data = [], [], False
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            key = line.split()[0].lower()
            if key == "@classlabel":
                classes = line.split()[2:]
            elif key in ("@timestamps", "@missing") and line.split()[1].lower() != "false":
                raise ValueError(f"{path}: {line} is not supported")
            in_data = key == "@data"
            continue
        *channels, label = line.split(":")
        xs.append([[float(v) for v in c.split(",")] for c in channels])
        ys.append(classes.index(label))
    return np.asarray(xs, np.float32), np.asarray(ys, np.int64), classes


def windows(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping windows of STEPS steps, STRIDE apart, each labelled with its recording's
    class (recordings stay whole on one side of every split)."""
    starts = range(0, x.shape[2] - STEPS + 1, STRIDE)
    return (np.stack([r[:, s:s + STEPS] for r in x for s in starts]),
            np.repeat(y, len(starts)))


def rotate(x: np.ndarray, degrees: float) -> np.ndarray:
    """The watch turned about its z axis: the accelerometer (channels 0-2) and the gyroscope
    (3-5) sit on one board, so one rotation turns both triples."""
    a = np.radians(degrees)
    r = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]], np.float32)
    out = x.copy()
    for k in (0, 3):
        out[:, k:k + 3] = np.einsum("ij,njl->nil", r, x[:, k:k + 3])
    return out


class Conv1dNet(nn.Module):
    """Conv1d 5 (+BN, ReLU) -> depthwise Conv1d 3 stride 2 (ReLU) -> MaxPool1d 2 ->
    pointwise Conv1d 32 (ReLU) -> global mean -> Linear 4."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(6, 16, 5, padding=2), nn.BatchNorm1d(16), nn.ReLU(),
            nn.Conv1d(16, 16, 3, stride=2, padding=1, groups=16), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(16, 32, 1), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
            nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class Recurrent(nn.Module):
    """One GRU or LSTM layer (batch_first) and a Linear 4 on the last step's output."""

    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.rnn = cell(6, HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, 4)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.fc(out[:, -1])


MODELS = {"conv1d": (Conv1dNet, False, 1e-2), "gru": (lambda: Recurrent(nn.GRU), True, 5e-3),
          "lstm": (lambda: Recurrent(nn.LSTM), True, 5e-3)}  # name: (make, steps first, Adam lr)


def layout(x: np.ndarray, steps_first: bool) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 1) if steps_first else x)


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def pretrain(model: nn.Module, x: np.ndarray, y: np.ndarray, lr: float) -> None:
    """Adam, batch 16, a seeded order."""
    opt = torch.optim.Adam(model.parameters(), lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    order = torch.Generator().manual_seed(0)
    for _ in range(PRETRAIN_EPOCHS):
        model.train()
        perm = torch.randperm(len(y), generator=order)
        for i in range(0, len(y), 16):
            b = perm[i:i + 16]
            loss = nn.functional.cross_entropy(model(xt[b]), yt[b])
            opt.zero_grad()
            loss.backward()
            opt.step()


def adapt_like_device(model: nn.Module, x: np.ndarray, y: np.ndarray) -> nn.Module:
    """What `tinytrain run --epochs 5 --shuffle --seed 1` does with a `full` build of lr 0.02:
    plain SGD, batch 1, every parameter (the BN frozen in eval mode, as it is folded). The
    sample order differs from run's, so this is a reference for the accuracy, not a parity
    check."""
    model = copy.deepcopy(model).eval()
    opt = torch.optim.SGD(model.parameters(), ADAPT_LR)
    rng = np.random.default_rng(ADAPT_SEED)
    for _ in range(ADAPT_EPOCHS):
        for i in rng.permutation(len(y)):
            loss = nn.functional.cross_entropy(model(torch.from_numpy(x[i:i + 1])),
                                               torch.from_numpy(y[i:i + 1]))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


def export(model: nn.Module, x: np.ndarray, path: Path) -> None:
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's notes on GRU/LSTM batch sizes
        torch.onnx.export(model, (torch.from_numpy(x[:1]),), str(path), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["logits"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?", default=HERE)
    ap.add_argument("--data-dir", type=Path, help="BasicMotions_TRAIN.ts and _TEST.ts "
                    "(default: inside the installed aeon package)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # the same floats on any machine
    src = args.data_dir or aeon_data_dir()
    x_pre, y_pre, classes = read_ts(src / "BasicMotions_TRAIN.ts")
    x_new, y_new, _ = read_ts(src / "BasicMotions_TEST.ts")
    print(f"BasicMotions from {src}: {len(x_pre)} + {len(x_new)} recordings of "
          f"{x_pre.shape[1]} channels x {x_pre.shape[2]} steps; classes {classes}")

    # Pretraining: the TRAIN split's 40 recordings, the sensor as mounted. The TEST split's
    # recordings come from the re-mounted sensor: per class, 5 to adapt on and 5 held out.
    wx, wy = windows(x_pre, y_pre)
    mean = wx.mean(axis=(0, 2))
    # one scale per sensor (not per axis), so normalising commutes with turning the sensor
    std = np.repeat([wx[:, 0:3].std(), wx[:, 3:6].std()], 3).astype(np.float32)

    def norm(v: np.ndarray) -> np.ndarray:
        return ((v - mean[:, None]) / std[:, None]).astype(np.float32)

    rec = np.arange(len(y_new))
    adapt = np.concatenate([rec[y_new == c][:ADAPT_PER_CLASS] for c in range(len(classes))])
    held = np.concatenate([rec[y_new == c][ADAPT_PER_CLASS:] for c in range(len(classes))])
    ax, ay = windows(x_new[adapt], y_new[adapt])
    hx, hy = windows(x_new[held], y_new[held])
    pre = norm(wx)
    sets = {"train": (norm(rotate(ax, ROTATION_DEG)), ay),
            "test": (norm(rotate(hx, ROTATION_DEG)), hy)}
    mounted = norm(hx)  # the held-out recordings as the sensor was mounted in pretraining
    args.out.mkdir(parents=True, exist_ok=True)
    for kind, steps_first in (("conv1d", False), ("rnn", True)):
        for split, (x, y) in sets.items():
            path = args.out / f"{kind}_{split}.npz"
            np.savez_compressed(path, x=layout(x, steps_first), y=y, norm_mean=mean,
                                norm_std=std)
            print(f"wrote {path}: x {layout(x, steps_first).shape}")

    print("\n| model | params | pretrain windows | held out, as mounted | turned 90°: before "
          "| after SGD in PyTorch | seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (make, steps_first, lr) in MODELS.items():
        t0 = time.monotonic()
        torch.manual_seed(0)
        model = make()
        pretrain(model, layout(pre, steps_first), wy, lr)
        tx, ty = layout(sets["test"][0], steps_first), sets["test"][1]
        after = adapt_like_device(model, layout(sets["train"][0], steps_first), sets["train"][1])
        export(model, tx, args.out / f"{name}.onnx")
        n = sum(p.numel() for p in model.parameters())
        print(f"| {name} | {n:,} | {accuracy(model, layout(pre, steps_first), wy):.3f} | "
              f"{accuracy(model, layout(mounted, steps_first), hy):.3f} | "
              f"{accuracy(model, tx, ty):.3f} | {accuracy(after, tx, ty):.3f} | "
              f"{time.monotonic() - t0:.0f} |")


if __name__ == "__main__":
    main()
