"""Write train/test .npz files from scikit-learn's bundled UCI digits (no download needed).

x is (N, 1, 8, 8) float32 in [0, 1], the model's own NCHW input layout; y the digit labels.
A fixed, stratified 80/20 split keeps the numbers in the README reproducible.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main(out_dir: Path) -> None:
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    out_dir.mkdir(parents=True, exist_ok=True)
    np.savez(out_dir / "digits_train.npz", x=xtr, y=ytr)
    np.savez(out_dir / "digits_test.npz", x=xte, y=yte)
    print(f"wrote {len(xtr)} training and {len(xte)} test samples to {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("out"))
