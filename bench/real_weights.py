"""Which int8 kernel paths ImageNet-like weights take that bench/speed.py's digits copies do not.

    python bench/real_weights.py                       # 3 networks x 5 variants, stm32f746 twin
    python bench/real_weights.py --models MobileNetV2 --variants digits,dead-1
    python bench/real_weights.py --cache /tmp/rw       # keep the pretrained copies between runs
    python bench/real_weights.py --no-members          # skip the per-member builds (half the time)

TTE's networks reportedly cost 4-18 % more instructions per training step with their ImageNet
weights than bench/speed.py's digits-pretrained copies, and ImageNet weights are not to be had
offline. What the optimised int8 kernels branch on is the requantisation parameters: a conv
(tt_q8_conv_opt.c, ctx_init) takes its fast kernels for the channels with mult >= 0, a right
shift of 1..22 and |bias| < 2^30 - k * 2^15 (k: taps x cin), or mult 0 (a dead channel, which
the compiler gives shift -1, whatever its bias); until the commits that followed this bench one
channel outside that sent the whole layer to the general path, now only its channel pair
(any_pair / ws_any_ch, right shifts 23..31 through rq_wide). A depthwise conv (tt_q8_dw_opt.c,
dw_fast_channel) decides per group of 4 channels (a refused group leaves the ring path for
dw_group and the reference requantisation; shifts up to 31 pass when 2^(e-1) + out_offset * 2^e
still fits; a dead channel's bias no longer counts). The path tables apply the kernels' current
predicates: a conv is "slow" when some channel pair falls back. The residual add
(add_run) checks its output multiplier. The fp32 backward's only data tests are finiteness
checks (cs_finite) that int8 weights always pass.

An int8 ImageNet-trained MCUNet (TinyEngine's `examples/openmv_training` code generator
output, mit-han-lab/tinyengine; not shipped here, its statistics are REAL_PROFILE below) shows
what trips them: *dead* channels of the 1x1 expand convs (BN-folded weights ~1e-20, per-channel
scale ~1e-22, so the multiplier underflows to (0, 0): shift 0, and the int32 bias saturates at
+-(2^31 - 1)), the depthwise channels behind them (dead too), and *near-dead* expand channels
(weights and bias both ~1e-6 of their peers: right shifts 24..31, bias in range). 9 of its 30
convs (the stem and 8 of 14 expand convs, 2-17 % of their channels) and 8 of its 15 depthwise
convs; never a bias outside the range on a live channel, never a project conv.

This bench reproduces those features on the real graphs: bench/speed.py's digits copies
(bench/pretrain.py, same seeds), transformed before export:
  digits          unchanged (bench/speed.py's figures)
  dead-1          one dead channel in the stem and in every expand conv (weights x 1e-20), the
                  depthwise channel behind it dead too
  dead-8%         8 % of those layers' channels dead (at least one)
  near-dead-1     one channel per expand conv with weights and bias x 2^-20 (right shift > 22)
  mcunet-profile  the real MCUNet's per-layer dead / near-dead fractions, mapped by depth
then each is built int8 with speed.py's options (the main TTE scheme, stochastic rounding, every
memory pass) for the stm32f746, counted on its QEMU twin (tinytrain.device.bench.measure, 2
steps on held-out digits), and every forward int8 layer's path is computed from the build's
final graph with the kernels' own predicates. Tables: instructions per step, the slow layers
with the predicate each failed, and the ops whose instructions changed most against digits
(ops inside row streams one by one, from a profile_members build, as speed.py does).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretrain import digits_rgb, pretrain  # noqa: E402  (bench/pretrain.py)
from speed import CALIB, _leaves  # noqa: E402  (bench/speed.py: same calibration, op rows)

from tests.torch_models import export  # noqa: E402
from tests.tte_schemes import MAIN_SCHEME, NETWORKS, SCHEMES  # noqa: E402
from tinytrain.device.bench import measure  # noqa: E402
from tinytrain.device.build import build  # noqa: E402
from tinytrain.device.runner import load_program_info  # noqa: E402
from tinytrain.passes.pipeline import Options  # noqa: E402

BOARD = "stm32f746"
STEPS = 2
DEAD = 1e-20  # a dead channel's weights: scale ~1e-22, as in the real file (8e-23 .. 7e-14)
NEAR = 2.0 ** -20  # a near-dead channel's weights and bias: shifts 24..31 on these nets
# The real int8 MCUNet (TinyEngine openmv_training): stem (cout, dead, near-dead), then its 14
# 1x1 expand convs in order. Dead: mult 0 / shift 0 (and the bias saturated in 38 of 41 per
# layer and so on); near-dead: right shift 24..31 with the bias in range. The depthwise conv
# behind each expand conv had about as many dead channels as it.
REAL_STEM = (16, 2, 0)
REAL_PROFILE = ((48, 1, 0), (48, 0, 0), (48, 0, 0), (48, 0, 0), (144, 7, 0), (120, 0, 1),
                (144, 12, 6), (240, 41, 1), (240, 19, 4), (192, 0, 0), (240, 0, 0),
                (480, 37, 3), (384, 21, 5), (288, 0, 0))
VARIANTS = ("digits", "dead-1", "dead-8%", "near-dead-1", "mcunet-profile")
TOP = 8  # changed ops listed per network and variant
# the conv kernels' constants (tt_q8_conv_opt.c, tt_q8_dw_opt.c)
CV_KMAX, ACC_LIMIT = 16384, 1 << 30


# ---- weight variants ----

def _blocks(net: nn.Module) -> tuple[nn.Conv2d, list[tuple[nn.Conv2d | None, nn.Conv2d]]]:
    """The stem conv and each inverted-bottleneck block's (1x1 expand conv or None, depthwise
    conv), in order."""
    stem = next(m for m in net.modules() if isinstance(m, nn.Conv2d))
    out = []
    for m in net.modules():
        body = getattr(m, "body", None)
        if isinstance(body, nn.Sequential):
            convs = [c for c in body if isinstance(c, nn.Conv2d)]
            dw = next(c for c in convs if c.groups > 1)
            out.append((convs[0] if convs[0] is not dw else None, dw))
    return stem, out


def _pick(rng: np.random.Generator, c: int, n: int) -> np.ndarray:
    return np.sort(rng.choice(c, size=min(n, c), replace=False))


@torch.no_grad()
def _kill(conv: nn.Conv2d, dw: nn.Conv2d | None, idx: np.ndarray) -> None:
    """Dead channels: weights ~0 (BN gamma ~0 after folding), the bias kept (beta), and the
    depthwise channel they feed dead too."""
    i = torch.as_tensor(idx)
    conv.weight[i] *= DEAD
    if dw is not None:
        dw.weight[i] *= DEAD


@torch.no_grad()
def _shrink(conv: nn.Conv2d, idx: np.ndarray) -> None:
    """Near-dead channels: weights and bias both small (gamma and beta decayed together)."""
    i = torch.as_tensor(idx)
    conv.weight[i] *= NEAR
    conv.bias[i] *= NEAR


def transform(net: nn.Module, variant: str, seed: int = 0) -> nn.Module:
    """A copy of the folded `net` with `variant`'s channels made dead or near-dead."""
    net = copy.deepcopy(net)
    rng = np.random.default_rng(seed)
    stem, blocks = _blocks(net)
    first_dw = blocks[0][1] if blocks and blocks[0][0] is None else None
    expands = [(e, d) for e, d in blocks if e is not None]
    if variant == "digits":
        return net
    if variant in ("dead-1", "dead-8%"):
        frac = 0.0 if variant == "dead-1" else 0.08
        for conv, dw in [(stem, first_dw)] + expands:
            c = conv.out_channels
            _kill(conv, dw, _pick(rng, c, max(1, round(frac * c))))
    elif variant == "near-dead-1":
        for conv, _ in expands:
            _shrink(conv, _pick(rng, conv.out_channels, 1))
    elif variant == "mcunet-profile":
        c0, d0, _ = REAL_STEM
        _kill(stem, first_dw, _pick(rng, stem.out_channels,
                                    max(1, round(d0 / c0 * stem.out_channels))))
        n = len(expands)
        for i, (conv, dw) in enumerate(expands):
            rc, dead, near = REAL_PROFILE[round(i * (len(REAL_PROFILE) - 1) / max(n - 1, 1))]
            c = conv.out_channels
            nd = max(1, round(dead / rc * c)) if dead else 0
            nn_ = max(1, round(near / rc * c)) if near else 0
            idx = _pick(rng, c, nd + nn_)
            _kill(conv, dw, idx[:nd])
            _shrink(conv, idx[nd:])
    else:
        raise ValueError(f"unknown variant {variant}")
    return net


# ---- the kernels' predicates, from the build's final graph ----

def _forward_nodes(nodes, parent: str | None = None):
    """(op name in the profile, node) of every forward int8 conv / add, streams opened."""
    for n in nodes:
        if n.attrs.get("_nodes"):
            yield from _forward_nodes(n.attrs["_nodes"], n.name)
        elif n.phase == "forward" and n.op in ("conv2d_q8", "add_q8"):
            yield n.name, n


def _conv_path(g, n) -> dict:
    """tt_q8_conv_opt.c (pointwise, regular conv: ctx_init / fast_channel, per layer) or
    tt_q8_dw_opt.c (depthwise: dw_fast_channel, per group of 4)."""
    a = n.attrs
    shape = g.t(n.inputs[1]).shape  # a partial update's weight is merged: only its shape here
    b = g.t(n.inputs[2]).data if len(n.inputs) > 2 else None
    cout = shape[0]
    k = int(np.prod(shape[1:]))
    m = np.asarray(a["mult"], np.int64)
    sh = np.asarray(a["shift"], np.int64)
    bias = np.zeros(cout, np.int64) if b is None else np.asarray(b, np.int64).reshape(-1)
    dw = a["groups"] > 1 and a["groups"] == cout
    row = {"kind": f"dw {a['kernel'][0]}x{a['kernel'][1]}/{a['stride'][0]}" if dw else
           ("pw" if a["kernel"] == (1, 1) else f"conv {a['kernel'][0]}x{a['kernel'][1]}"),
           "channels": cout, "reasons": {}}
    dead = m == 0
    if dw:
        taps = int(np.prod(a["kernel"]))
        e = -sh
        acc = np.where(dead, 0, np.abs(bias)) + taps * (128 + abs(a["in_offset"])) * 128
        cst = (1 << (np.clip(e, 1, 40) - 1)) + a["out_offset"] * (1 << np.clip(e, 1, 40))
        bad_rq = (m < 0) | (e < 1) | (e > 31)
        bad_acc = acc >= ACC_LIMIT
        bad_cst = ~bad_rq & ~bad_acc & (e > 22) & (acc + 2 + np.abs(cst) >= 1 << 31)
        bad = bad_rq | bad_acc | bad_cst
        ng = cout // 4
        groups = bad[:4 * ng].reshape(ng, 4).any(1)
        wide = bad_cst | ((e > 31) & ~dead)  # a wider shift range would take these
        row.update(slow=int(groups.sum()), unit=f"of {ng} groups", slow_ch=int(bad.sum()),
                   tail=cout - 4 * ng, wide_shift_ok=int(((e > 22) & ~bad).sum()),
                   fix=_fix(bad, dead, wide), pairs=ng,
                   slow_pairs=int(groups.sum()))
        reasons = {"dead (mult 0, shift 0)": dead & bad,
                   "shift >= 0": (e < 1) & ~dead, "right shift > 31": (e > 31) & ~dead,
                   "|bias| + sum bound >= 2^30 (live channel)": bad_acc & ~dead,
                   "right shift > 22, constant overflows": bad_cst}
    else:
        valid = (1 <= k <= CV_KMAX and -128 <= a["in_offset"] <= 128
                 and -128 <= a["out_offset"] <= 128 and a["act_min"] >= -128
                 and a["act_max"] <= 127 and a["act_min"] <= a["act_max"])
        blim = ACC_LIMIT - k * 32768
        bad_rq = (m < 0) | (sh > -1) | (sh < -22)
        bad_b = (np.abs(bias) >= blim) & ~dead
        bad = bad_rq | bad_b
        wide = (sh < -22) & (sh >= -31) & ~dead & (m >= 0) & ~bad_b
        pairs = bad[:cout - cout % 2].reshape(-1, 2).any(1).sum() + (bad[-1] if cout % 2 else 0)
        row.update(slow=int(bad.any()) if valid else 1, unit="layer", slow_ch=int(bad.sum()),
                   reference=not valid, fix=_fix(bad, dead, wide) if valid else "none",
                   pairs=(cout + 1) // 2, slow_pairs=int(pairs))
        reasons = {"dead (mult 0, shift 0)": dead & bad, "shift >= 0": (sh > -1) & ~dead,
                   "right shift > 22 (pair falls back)": sh < -22, "mult < 0": m < 0,
                   "|bias| >= 2^30 - k 2^15, live channel": bad_b}
    row["reasons"] = {r: int(v.sum()) for r, v in reasons.items() if v.any()}
    row["clamp"] = a["act_min"] != -128 or a["act_max"] != 127
    return row


def _fix(bad: np.ndarray, dead: np.ndarray, wide: np.ndarray) -> str:
    """Which proposed change makes every channel of a layer fast: "" (already), "A" (dead
    channels: mult 0 normalised to shift -1, their bias not checked), "A+B" (and right shifts
    up to 31), "C" (only a per-channel-pair fallback)."""
    if not bad.any():
        return ""
    live = bad & ~dead
    if not live.any():
        return "A"
    return "A+B" if not (live & ~wide).any() else "C"


def _add_path(n) -> dict:
    """tt_q8_dw_opt.c's add_run: the reference loop unless the output multiplier's right
    shift is 1..22, and the linear + general input pair takes the assembly loop."""
    a = n.attrs
    lin = [a[f"{s}_mult"] == 1 << 30 and a[f"{s}_shift"] == 0 for s in "ab"]
    gen = [a[f"{s}_mult"] >= 0 and -31 <= a[f"{s}_shift"] <= -1 for s in "ab"]
    reasons = {}
    if not -22 <= a["out_shift"] <= -1 or a["out_mult"] < 0:
        reasons["output shift outside 1..22"] = 1
    if not all(li or ge for li, ge in zip(lin, gen)):
        reasons["input multiplier"] = 1
    if all(lin):
        reasons["both inputs linear (C loop)"] = 1
    return {"kind": "add", "channels": 0, "slow": int(bool(reasons)), "unit": "layer",
            "slow_ch": 0, "reasons": reasons, "fix": "C" if reasons else "", "pairs": 0,
            "slow_pairs": 0,
            "clamp": a["act_min"] != -128 or a["act_max"] != 127}


def paths(g) -> list[dict]:
    """Every forward int8 conv and add of graph `g` with the path the optimised kernels take."""
    out = []
    for op, n in _forward_nodes(g.nodes):
        r = _conv_path(g, n) if n.op == "conv2d_q8" else _add_path(n)
        out.append({"name": n.name, "op": op, **r})
    return out


# ---- building and measuring ----

def _pretrained(name: str, x: np.ndarray, y: np.ndarray, cache: Path) -> nn.Module:
    """bench/speed.py's digits copy of network `name` (seed 0, bench/pretrain.py), cached."""
    torch.manual_seed(0)
    net = NETWORKS[name]()
    f = cache / f"{name}.pt"
    if f.exists():  # the folded net has the plain layout (BN gone, every conv biased)
        net.load_state_dict(torch.load(f))
        return net.eval()
    pretrain(net, x, y)
    torch.save(net.state_dict(), f)
    return net


def run(name: str, net: nn.Module, variant: str, tmp: Path, calib: Path, samples: Path,
        members: bool) -> dict:
    tag = f"{name}-{variant}".replace("%", "pc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = export(transform(net, variant), tmp / f"{tag}.onnx")
    opts = {"update": SCHEMES[name, MAIN_SCHEME[name]], "quantize": "int8", "calib": calib}
    graphs = []
    out = tmp / tag
    build(path, out, Options(board=BOARD, kernels="optimized", **opts),
          on_pass=lambda _n, g: graphs.append(g))
    r = measure(out, steps=STEPS, data=samples)
    inside = None
    if members and load_program_info(out).get("profile_members"):
        counted = tmp / f"{tag}-members"
        build(path, counted, Options(board=BOARD, kernels="optimized", profile_members=True,
                                     **opts))
        inside = measure(counted, steps=STEPS, data=samples)
    ops = {o["name"]: o for o in _leaves(r, inside)}
    print(f"measured {name} {variant}: {r['step']['instructions'] / 1e6:.2f} M "
          f"(non-finite skipped: {r['step']['skipped_nonfinite']})", file=sys.stderr)
    return {"network": name, "variant": variant, "step": r["step"]["instructions"],
            "phases": r["phases"], "ops": ops, "paths": paths(graphs[-1])}


# ---- tables ----

def _m(v: float) -> str:
    return f"{v / 1e6:.2f} M"


def report(rows: list[dict]) -> None:
    nets = list(dict.fromkeys(r["network"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    by = {(r["network"], r["variant"]): r for r in rows}
    print(f"### instructions per training step ({BOARD} twin; in brackets: against digits)\n")
    print("| variant | " + " | ".join(nets) + " |")
    print("|---|" + "---:|" * len(nets))
    for v in variants:
        cells = []
        for n in nets:
            r, base = by.get((n, v)), by.get((n, "digits"))
            if r is None:
                cells.append("")
                continue
            d = "" if base is None or v == "digits" else \
                f" ({r['step'] - base['step']:+,.0f}, " \
                f"{100 * (r['step'] / base['step'] - 1):+.1f} %)"
            cells.append(_m(r["step"]) + d)
        print(f"| {v} | " + " | ".join(cells) + " |")
    print("\n### where the difference is: forward / backward, and the forward's delta in the "
          "convs on the general path, in the depthwise convs with refused groups, elsewhere\n")
    print("| network | variant | forward | backward | slow convs | slow dw groups | "
          "slow channels | slow adds | clamped | delta: slow convs | slow dw | rest |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        p, base = r["paths"], by.get((r["network"], "digits"))
        convs = [x for x in p if x["unit"] == "layer" and x["kind"] != "add"]
        dws = [x for x in p if x["kind"].startswith("dw")]
        d_conv = d_dw = 0.0
        if base is not None:
            for x in p:
                o, b = r["ops"].get(x["name"]), base["ops"].get(x["name"])
                if x["slow"] and o and b:
                    if x in dws:
                        d_dw += o["instructions"] - b["instructions"]
                    else:
                        d_conv += o["instructions"] - b["instructions"]
        rest = r["step"] - base["step"] - d_conv - d_dw if base is not None else 0.0
        print(f"| {r['network']} | {r['variant']} | {_m(r['phases']['forward'])} | "
              f"{_m(r['phases']['backward'])} | {sum(x['slow'] for x in convs)} of "
              f"{len(convs)} | {sum(x['slow'] for x in dws)} of "
              f"{sum(x['channels'] // 4 for x in dws)} | "
              f"{sum(x['slow_ch'] for x in p)} | "
              f"{sum(x['slow'] for x in p if x['kind'] == 'add')} of "
              f"{sum(x['kind'] == 'add' for x in p)} | {sum(x['clamp'] for x in p)} | "
              f"{d_conv:+,.0f} | {d_dw:+,.0f} | {rest:+,.0f} |")
    _recoverable(rows, by)
    print("\n### slow layers: the predicate each failed (channels), and the layer's "
          "instructions against digits\n")
    print("| network | variant | layer | kind | slow | predicates failed | digits | variant "
          "| delta |")
    print("|---|---|---|---|---|---|---:|---:|---:|")
    for r in rows:
        base = by.get((r["network"], "digits"))
        for x in r["paths"]:
            if not x["slow"] and not x["reasons"]:
                continue
            o = r["ops"].get(x["name"]) or r["ops"].get(x["op"])
            bo = base["ops"].get(x["name"]) if base else None
            ins = o["instructions"] if o else None
            b_ins = bo["instructions"] if bo else None
            what = ", ".join(f"{k}: {v}" for k, v in x["reasons"].items())
            slow = (f"{x['slow']} {x['unit']}" if x["unit"] != "layer" else
                    ("reference kernel" if x.get("reference") else "general path"
                     if x["slow"] else "fast"))
            print(f"| {r['network']} | {r['variant']} | {x['name'].lstrip('_')} | {x['kind']} | "
                  f"{slow} | {what} | {'' if b_ins is None else f'{b_ins:,.0f}'} | "
                  f"{'' if ins is None else f'{ins:,.0f}'} | "
                  f"{'' if ins is None or b_ins is None else f'{ins - b_ins:+,.0f}'} |")
    print(f"\n### the {TOP} ops whose instructions changed most against digits\n")
    print("| network | variant | op | kind | digits | variant | delta |")
    print("|---|---|---|---|---:|---:|---:|")
    for r in rows:
        base = by.get((r["network"], "digits"))
        if base is None or r is base:
            continue
        d = [(k, o, base["ops"][k]) for k, o in r["ops"].items() if k in base["ops"]]
        d.sort(key=lambda t: -abs(t[1]["instructions"] - t[2]["instructions"]))
        for k, o, b in d[:TOP]:
            print(f"| {r['network']} | {r['variant']} | {k.lstrip('_')} | {o['op']} | "
                  f"{b['instructions']:,.0f} | {o['instructions']:,.0f} | "
                  f"{o['instructions'] - b['instructions']:+,.0f} |")


def _recoverable(rows: list[dict], by: dict) -> None:
    """What each proposed kernel change would give back: a layer all of whose failing
    channels a change covers returns to its digits count (same graph, every channel fast);
    the per-pair fallback (C) keeps the slow pairs' share of the layer's delta."""
    print("\n### instructions each proposed change would recover (a layer it covers returns to "
          "its digits count; C keeps the slow channel pairs' share of the delta)\n")
    print("| network | variant | delta | A: dead channels fast | A+B: and right shifts to 31 | "
          "C: per-pair fallback alone | A+B+C |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        base = by.get((r["network"], "digits"))
        if base is None or r is base:
            continue
        got = {"A": 0.0, "A+B": 0.0, "C": 0.0, "all": 0.0}
        for x in r["paths"]:
            o, b = r["ops"].get(x["name"]), base["ops"].get(x["name"])
            if not x["slow"] or not o or not b:
                continue
            d = o["instructions"] - b["instructions"]
            # a depthwise conv already falls back per group of 4: C changes nothing there
            keep = d if x["kind"].startswith("dw") or not x["pairs"] else \
                d * x["slow_pairs"] / x["pairs"]
            got["A"] += d if x["fix"] == "A" else 0
            got["A+B"] += d if x["fix"] in ("A", "A+B") else 0
            got["C"] += d - keep
            got["all"] += d if x["fix"] in ("A", "A+B") else d - keep
        delta = r["step"] - base["step"]
        print(f"| {r['network']} | {r['variant']} | {delta:+,.0f} | " + " | ".join(
            f"{got[k]:,.0f} ({100 * got[k] / delta:.0f} %)" if delta else "0"
            for k in ("A", "A+B", "C", "all")) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="networks whose name contains one of these (comma list)")
    ap.add_argument("--variants", help=f"comma list of {', '.join(VARIANTS)} (default all)")
    ap.add_argument("--cache", type=Path, help="directory keeping the pretrained copies")
    ap.add_argument("--json", type=Path, help="also write the measurements and paths here")
    ap.add_argument("--no-members", action="store_true",
                    help="skip the profile_members builds (streams stay one op each)")
    args = ap.parse_args()
    wanted = args.models.split(",") if args.models else [""]
    variants = args.variants.split(",") if args.variants else list(VARIANTS)
    if "digits" not in variants:
        variants.insert(0, "digits")  # the baseline every delta is against
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v}")
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        cache = args.cache or tmp
        cache.mkdir(parents=True, exist_ok=True)
        x_tr, y_tr, x_te, y_te = digits_rgb(128)
        calib, samples = tmp / "calib.npz", tmp / "samples.npz"
        np.savez(calib, x=x_tr[:CALIB])
        np.savez(samples, x=x_te, y=y_te.astype(np.int32))
        for name in NETWORKS:
            if not any(w in name for w in wanted):
                continue
            net = _pretrained(name, x_tr, y_tr, cache)
            for v in variants:
                rows.append(run(name, net, v, tmp, calib, samples, not args.no_members))
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
