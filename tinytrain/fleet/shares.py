"""Which devices share the average of each tensor: a fleet of device classes without
interference.

Devices of a mixed fleet train different parts of one model. Averaging a tensor over all of
them mixes updates made in different functions: a bias-only device's classifier is trained
on features from the pretrained convolutions, a `last:2` device's on features from
convolutions it trains itself. The average fits neither, and the smaller class loses what
it learned (bench/fleet.py, half `bias` and half `last:2`: the bias class ends at 47.5 %
with one average, 54.9 % with its own copy of the classifier).

So the server keeps one copy of a tensor per *context*: which of its channels the device
trains, and the trained tensors that feed its layer's output besides it (program.json's
`upstream`, codegen/program.py) with the channels the device trains of them. Devices whose
context of a tensor is the same compute the same function with it: their updates are
averaged together. Others train their own copy. Every device of a copy trains the same
elements of it, so a device receives only those (its elements of the server's control
variate too): the downlink carries what the uplink does.
Devices of one plan therefore always share everything; a tensor early in the network that
two classes train on the same input (the "shared body") is shared between them, and a
classifier fed by different trained layers (the "head") is each class's own.

`all` (share="all") averages every tensor over every device that trains it, as one model.
With devices built with `--receive` (passes/receive.py), which are sent the fleet's values of
what other classes train, every class then runs that one model: classes aligned, the
alternative to copies (check_received).

A copy's key is the tensor's name when it has one copy, `name@k` (k = 0, 1, ... in the order
of the contexts' descriptions) when it has several: fleet_final.npz holds the copies and
fleet_rounds.json maps each node's tensors to them (`copies`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from tinytrain.errors import DataError, OptionError
from tinytrain.fleet.aggregate import Reply
from tinytrain.fleet.tensors import Trained

SHARES = ("matching", "all")  # the run config's `share`
SEP = "@"
UNKNOWN = "?"  # the context of a build without `upstream` (older program.json): its own


def context(t: Trained, plan: list[Trained]) -> str:
    """Which of t's channels this plan trains, and the trained tensors (with their channels)
    that feed t's layer."""
    if t.upstream is None:
        return UNKNOWN
    up = set(t.upstream)
    return json.dumps([_channels(t), sorted([u.name, *_channels(u)] for u in plan
                                            if u.name in up)])


def _channels(t: Trained) -> list:
    return [None if t.channels is None else list(t.channels), t.axis]


def check_received(kinds: Mapping[str, Trained], received: Mapping[str, list[Trained]],
                   share: str) -> None:
    """A device can be sent a tensor another class trains only as that tensor's one average
    (share all: the classes run one model), in the same layout and, for int8, the same scale
    (the same codes mean the same values). `received` maps a device (its description) to what
    it can be sent; `kinds` names what the fleet's devices train."""
    for who, entries in received.items():
        for t in entries:
            k = kinds.get(t.name)
            if k is None:
                continue  # no device trains it: it stays as built everywhere
            if share != "all":
                raise DataError(f"{who} receives '{t.name}' (built with --receive), which "
                                "other devices train: a fleet of aligned classes shares one "
                                "average of every tensor; run it with share='all' (--share "
                                "all)")
            if (k.shape, k.dtype, k.scale) != (t.shape, t.dtype, t.scale):
                raise DataError(f"{who} receives '{t.name}' as {t.shape} {t.dtype}"
                                f"{'' if t.scale is None else ' at its own scales'}, the "
                                f"devices that train it hold {k.shape} {k.dtype}: build every "
                                "class from one model (int8: with the same --calib and "
                                "--weight-headroom)")


class Shares:
    """The copies of each tensor and which plan trains which (see the module docstring)."""

    def __init__(self, plans: Mapping[int, list[Trained]], share: str = "matching") -> None:
        if share not in SHARES:
            raise OptionError(f"share must be one of {', '.join(SHARES)}, not '{share}'")
        self.share = share
        found: dict[str, set[str]] = {}
        for plan in plans.values():
            for t in plan:
                found.setdefault(t.name, set()).add(self._context(t, plan))
        self.keys: dict[tuple[str, str], str] = {}
        for name, contexts in found.items():
            for k, c in enumerate(sorted(contexts)):
                self.keys[name, c] = name if len(contexts) == 1 else f"{name}{SEP}{k}"
        self.first = {name: self.keys[name, min(c)] for name, c in found.items()}

    def _context(self, t: Trained, plan: list[Trained]) -> str:
        return "" if self.share == "all" else context(t, plan)

    def key(self, plan: list[Trained] | None, name: str) -> str:
        """The copy of `name` a device of `plan` trains. A plan the survey did not see (a
        device that joined later) or an unknown device (None) gets the tensor's first copy;
        a tensor no surveyed device trains is its own."""
        first = self.first.get(name, name)
        t = next((t for t in plan or [] if t.name == name), None)
        if t is None:
            return first
        return self.keys.get((name, self._context(t, plan or [])), first)

    def copies(self, plan: list[Trained]) -> dict[str, str]:
        """Name -> copy, for each tensor of `plan`."""
        return {t.name: self.key(plan, t.name) for t in plan}

    def keyed(self, plan: list[Trained]) -> list[Trained]:
        """The plan with each tensor renamed to its copy: what the server averages."""
        return [t.renamed(self.key(plan, t.name)) for t in plan]

    def reply(self, r: Reply) -> Reply:
        """A device's reply in the server's terms: each tensor under its copy's key."""
        c = self.copies(r.plan)
        return Reply({c.get(n, n): a for n, a in r.parts.items()}, self.keyed(r.plan),
                     r.samples, None if r.control is None else
                     {c.get(n, n): a for n, a in r.control.items()})
