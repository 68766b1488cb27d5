"""Splitting one dataset over simulated devices, IID or skewed by label as real fleets are
(each device sees mostly its own users' classes)."""

from __future__ import annotations

import numpy as np

from tinytrain.errors import OptionError

SCHEMES = "iid, labels:K (each device holds K classes), dirichlet:ALPHA (label shares ~ Dir(ALPHA))"


def split(y: np.ndarray, parts: int, scheme: str = "iid", seed: int = 0) -> list[np.ndarray]:
    """Indices into y for each of `parts` devices; every sample goes to exactly one device."""
    y = np.asarray(y).reshape(-1)
    rng = np.random.default_rng(seed)
    if parts < 1 or parts > len(y):
        raise OptionError(f"cannot split {len(y)} samples over {parts} devices")
    kind, _, arg = scheme.partition(":")
    classes = np.unique(y)
    if kind == "iid" and not arg:
        return [np.sort(p) for p in np.array_split(rng.permutation(len(y)), parts)]
    if kind == "labels":
        k = _number(arg, int, scheme)
        if not 1 <= k <= len(classes):
            raise OptionError(f"--partition {scheme}: K must be 1..{len(classes)}")
        # device d holds classes d, d+1, ..., d+k-1 (mod C); each class's samples are dealt
        # round-robin to the devices holding it
        holders = {c: [d for d in range(parts) if (i - d) % len(classes) < k]
                   for i, c in enumerate(classes)}
        out: list[list[int]] = [[] for _ in range(parts)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            hs = holders[c] or [int(rng.integers(parts))]
            for j, i in enumerate(idx):
                out[hs[j % len(hs)]].append(int(i))
        return [np.sort(np.asarray(p, np.int64)) for p in out]
    if kind == "dirichlet":
        alpha = _number(arg, float, scheme)
        if alpha <= 0:
            raise OptionError(f"--partition {scheme}: ALPHA must be > 0")
        out = [[] for _ in range(parts)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(y == c))
            share = rng.dirichlet(np.full(parts, alpha))
            cuts = (np.cumsum(share)[:-1] * len(idx)).astype(int)
            for d, chunk in enumerate(np.split(idx, cuts)):
                out[d].extend(int(i) for i in chunk)
        return [np.sort(np.asarray(p, np.int64)) for p in out]
    raise OptionError(f"unknown partition '{scheme}'; use {SCHEMES}")


def _number(text: str, kind: type, scheme: str):
    try:
        return kind(text)
    except ValueError:
        raise OptionError(f"--partition {scheme}: '{text}' is not a number; use "
                          f"{SCHEMES}") from None
