"""int8 on-device adaptation accuracy on real data (sklearn digits), seven arms, one sparse plan.

    python bench/accuracy.py            # Markdown table; --json FILE keeps the numbers

A small CNN is pretrained in PyTorch (fp32) on upright digits, then adapted to a domain shift
(the digits rotated by 90 degrees) with the same sparse update plan in every arm:
  1. fp32 PyTorch (frozen layers requires_grad=False), the reference;
  2. tinytrain fp32 (the ONNX model, host C build);
  3. tinytrain int8 + QAS (--quantize int8, calibrated on upright digits: what a deployed
     model was quantised with), stochastic rounding (the default);
  4. the same with the 1-byte shadow instead of stochastic rounding (the forward reads the
     floor of the 16-bit master), and 5. with the shadow read whole (--rounding master);
  6. int8 without QAS (--no-qas);
  7. int8 with QAS but TTE's truncating updates (--rounding truncate).
All arms see the same samples in the same order (batch 1, plain SGD, same lr and epochs).
Accuracy is on held-out rotated digits, by the C programs themselves (`tinytrain run --eval`).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
PLAN = "last:3"  # depthwise, pointwise and the classifier (weights + biases)
LR, EPOCHS, SEED = 0.01, 3, 0


class Net(nn.Module):
    input_shape = (1, 8, 8)

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 16, 3, padding=1)
        self.down = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.pw = nn.Conv2d(32, 32, 1)
        self.fc = nn.Linear(32, 10)
        self.act = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.down(self.act(self.stem(x))))
        h = self.act(self.pw(self.act(self.dw(h))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))

    def trained_last(self, k: int) -> list[nn.Module]:
        return [self.stem, self.down, self.dw, self.pw, self.fc][-k:]


def data() -> dict[str, np.ndarray]:
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(SEED)
    idx = rng.permutation(len(x))
    pre, ada, test = idx[:900], idx[900:1400], idx[1400:]
    rot = np.rot90(x, 1, axes=(2, 3)).copy()
    return {"pre_x": x[pre], "pre_y": y[pre], "ada_x": rot[ada], "ada_y": y[ada],
            "test_x": rot[test], "test_y": y[test], "calib_x": x[pre[:128]]}


def pretrain(d: dict[str, np.ndarray]) -> Net:
    torch.manual_seed(SEED)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    x, y = torch.tensor(d["pre_x"]), torch.tensor(d["pre_y"])
    for _ in range(40):
        for i in torch.randperm(len(x)).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[i]), y[i]).backward()
            opt.step()
    return net.eval()


def accuracy(net: Net, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((net(torch.tensor(x)).argmax(1).numpy() == y).mean())


def torch_adapt(net: Net, d: dict[str, np.ndarray]) -> Net:
    k = int(PLAN.split(":")[1])
    trained = {id(p) for m in net.trained_last(k) for p in m.parameters()}
    for p in net.parameters():
        p.requires_grad = id(p) in trained
    opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=LR)
    x, y = torch.tensor(d["ada_x"]), torch.tensor(d["ada_y"])
    for _ in range(EPOCHS):
        for i in range(len(x)):  # batch 1, file order: what the C programs see
            opt.zero_grad()
            nn.functional.cross_entropy(net(x[i:i + 1]), y[i:i + 1]).backward()
            opt.step()
    return net.eval()


def tinytrain(*args: str | Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "tinytrain", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"tinytrain {' '.join(map(str, args))} failed:\n{proc.stderr}")
    return proc.stdout


def c_arm(work: Path, name: str, model: Path, extra: list[str]) -> tuple[float, float, dict]:
    out = work / name
    tinytrain("build", model, "--out", out, "--update", PLAN, "--lr", str(LR), *extra)
    log = tinytrain("run", out, "--data", work / "ada.npz", "--eval", work / "test.npz",
                    "--epochs", str(EPOCHS))
    before = float(re.search(r"eval accuracy before: ([0-9.]+)", log).group(1))
    after = float(re.search(r"eval accuracy after: ([0-9.]+)", log).group(1))
    rep = json.loads((out / "report.json").read_text())
    return before, after, rep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    d = data()
    net = pretrain(d)
    rows = []
    pre_upright = accuracy(net, d["pre_x"], d["pre_y"])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = work / "net.onnx"
        torch.onnx.export(net, (torch.zeros(1, 1, 8, 8),), str(model), dynamo=False,
                          opset_version=17, input_names=["x"], output_names=["logits"])
        np.savez(work / "ada.npz", x=d["ada_x"], y=d["ada_y"])
        np.savez(work / "test.npz", x=d["test_x"], y=d["test_y"])
        np.savez(work / "calib.npz", x=d["calib_x"])
        before = accuracy(net, d["test_x"], d["test_y"])
        after = accuracy(torch_adapt(net, d), d["test_x"], d["test_y"])
        rows.append(("fp32 PyTorch (reference)", before, after, None))
        q8 = ["--quantize", "int8", "--calib", work / "calib.npz"]
        arms = [("tinytrain fp32", []),
                ("tinytrain int8 + QAS, stochastic rounding", q8),
                ("tinytrain int8 + QAS, 1-byte shadow", [*q8, "--rounding", "shadow"]),
                ("tinytrain int8 + QAS, 1-byte shadow read whole (master)",
                 [*q8, "--rounding", "master"]),
                ("tinytrain int8, no QAS", [*q8, "--no-qas"]),
                ("tinytrain int8 + QAS, truncating updates (TTE)", [*q8, "--rounding",
                                                                   "truncate"])]
        for k, (label, extra) in enumerate(arms):
            b, a, rep = c_arm(work, f"arm{k}", model, extra)
            rows.append((label, b, a, rep["sram_bytes"]["total"]))
    print(f"pretrained on upright digits: {pre_upright:.1%} (train); adapting to digits "
          f"rotated 90 degrees, plan `{PLAN}`, SGD lr {LR}, batch 1, {EPOCHS} epochs over "
          f"{len(d['ada_x'])} samples, {len(d['test_x'])} held-out\n")
    print("| arm | accuracy before | accuracy after | SRAM (bytes) |")
    print("|---|---|---|---|")
    for label, b, a, sram in rows:
        print(f"| {label} | {b:.1%} | {a:.1%} | {'' if sram is None else f'{sram:,}'} |")
    ref = rows[0][2]
    print(f"\nint8 + QAS vs fp32 PyTorch: {100 * (rows[2][2] - ref):+.1f} points")
    if args.json:
        args.json.write_text(json.dumps([dict(zip(("arm", "before", "after", "sram"), r))
                                         for r in rows], indent=1))


if __name__ == "__main__":
    main()
