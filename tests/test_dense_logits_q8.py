"""The training loss of an int8 classifier reads its unrounded logits (ops/dense_logits_q8.py):
the head's accumulators scaled to reals, with and without --rounding master's shadow.

Oracle: PyTorch's float64 matrix product of the exact integers (every sum below 2^53) times
the scales; the C kernel (runtime_c/reference/tt_q8_logits.c) against numpy bit for bit on
the host and the twins; the pass that attaches the loss, on a real TFLite model."""

from __future__ import annotations

import dataclasses
import re
import shutil

import numpy as np
import pytest

from tests import ckernel
from tinytrain.ir import Node
from tinytrain.ops import get_op
from tinytrain.ops.dense_logits_q8 import real_scales
from tinytrain.passes.add_loss import add_loss
from tinytrain.passes.pipeline import Options, compile_model, import_model

torch = pytest.importorskip("torch")

# float32(acc) * float32(scale) against the exact float64 product: two float32 roundings
REL_TOL = 2.0 ** -22
# (name, in, out, master, bias, extreme): "extreme" sums leave int32 under the master
CASES = [("head", 112, 5, False, True, False), ("head_master", 112, 5, True, True, False),
         ("no_bias", 37, 3, False, False, False), ("wide", 701, 10, True, True, True),
         ("wide_plain", 701, 10, False, True, True)]


def _case(spec: tuple, seed: int) -> tuple[Node, list[np.ndarray]]:
    name, n_in, n_out, master, bias, extreme = spec
    rng = np.random.default_rng(seed)
    x = (rng.choice([-128, 127], n_in) if extreme else rng.integers(-128, 128, n_in))
    w = (127 * rng.choice([-1, 1], (n_out, n_in)) if extreme
         else rng.integers(-127, 128, (n_out, n_in)))
    xs = [x.astype(np.int8), w.astype(np.int8)]
    inputs = ["x", "w"]
    if bias:
        xs.append(rng.integers(-5000, 5000, n_out).astype(np.int32))
        inputs.append("b")
    if master:
        xs.append(rng.integers(0, 256, (n_out, n_in)).astype(np.uint8))
        inputs.append("w_shadow")
    attrs = {"in_offset": int(rng.integers(-127, 129)), "x_scale": float(rng.uniform(0.01, 0.1)),
             "w_scale": [float(v) for v in rng.uniform(1e-3, 2e-2, n_out)], "master": master}
    return Node(name, "dense_logits_q8", tuple(inputs), ("y",), attrs), xs


def _exact(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    """The real logits in float64: PyTorch's sum of the exact integers, times the scales."""
    a = node.attrs
    unit = 256 if a["master"] else 1
    x = torch.tensor(xs[0].astype(np.float64) + a["in_offset"])
    w = torch.tensor(xs[1].astype(np.float64) * unit)
    if a["master"]:
        w = w + torch.tensor(xs[-1].astype(np.float64))
    acc = (w @ x).numpy()
    if "b" in node.inputs:
        acc = acc + xs[2].astype(np.float64) * unit
    return acc * real_scales(a, unit).astype(np.float64)


@pytest.mark.parametrize("spec", CASES, ids=[c[0] for c in CASES])
def test_numpy_logits_are_the_exact_sums_scaled(spec) -> None:
    node, xs = _case(spec, 1)
    y = get_op("dense_logits_q8").forward(node, xs)[0]
    want = _exact(node, xs)
    assert y.dtype == np.float32 and y.shape == want.shape
    assert np.all(np.abs(y - want) <= REL_TOL * np.abs(want)), (y, want)
    if node.attrs["master"]:  # a zero shadow is the plain head
        plain = dataclasses.replace(node, inputs=node.inputs[:-1],
                                    attrs={**node.attrs, "master": False})
        zero = [*xs[:-1], np.zeros_like(xs[-1])]
        assert np.array_equal(get_op("dense_logits_q8").forward(node, zero)[0],
                              get_op("dense_logits_q8").forward(plain, xs[:-1])[0])


def _c_floats(v: np.ndarray) -> str:
    return ", ".join(f"{float(f)!r}f" for f in np.asarray(v, np.float32).ravel())


def _header(cases: list[tuple[Node, list[np.ndarray]]]) -> str:
    out, rows, most = [], [], 1
    for k, (node, xs) in enumerate(cases):
        a = node.attrs
        unit = 256 if a["master"] else 1
        y = get_op("dense_logits_q8").forward(node, xs)[0]
        ints = lambda v: ", ".join(str(int(i)) for i in np.ravel(v))  # noqa: E731
        out.append(f"static const int8_t c{k}_x[] = {{{ints(xs[0])}}};\n"
                   f"static const int8_t c{k}_w[] = {{{ints(xs[1])}}};\n"
                   f"static const float c{k}_scale[] = {{{_c_floats(real_scales(a, unit))}}};\n"
                   f"static const float c{k}_y[] = {{{_c_floats(y)}}};\n")
        b = s = "NULL"
        if "b" in node.inputs:
            out.append(f"static const int32_t c{k}_b[] = {{{ints(xs[2])}}};\n")
            b = f"c{k}_b"
        if a["master"]:
            out.append(f"static const uint8_t c{k}_s[] = {{{ints(xs[-1])}}};\n")
            s = f"c{k}_s"
        n_out, n_in = xs[1].shape
        most = max(most, n_out)
        rows.append(f'    {{"{node.name}", {n_in}, {n_out}, {a["in_offset"]}, c{k}_x, c{k}_w, '
                    f"{s}, {b}, c{k}_scale, c{k}_y}},")
    return (f"#define N_CASES {len(cases)}\n#define MAX_Y {most}\n" + "".join(out)
            + "static const logits_case CASES[N_CASES] = {\n" + "\n".join(rows) + "\n};\n")


@pytest.mark.parametrize("target", ckernel.every_target())
def test_the_c_kernel_is_the_numpy_one(target, tmp_path) -> None:
    (tmp_path / "logits_cases.h").write_text(_header([_case(c, 7) for c in CASES]))
    prog = tmp_path / "test_logits.c"
    shutil.copy(ckernel.HERE / "test_logits.c", prog)
    r = ckernel.run(prog, target, tmp_path, sources=[ckernel.RUNTIME["tt_q8_logits.c"]])
    assert r.returncode == 0 and "done" in r.stdout, r.stdout[-2000:]
    found = re.findall(r"case (\S+) diff (\d+)", r.stdout)
    assert found == [(c[0], "0") for c in CASES]


def test_the_loss_reads_the_heads_unrounded_logits() -> None:
    """A linear int8 dense head feeds the loss through dense_logits_q8 (whose values lie
    within half an output LSB of the int8 logits, when those do not saturate); a head with
    a fused activation keeps the dequantised int8 output, whose clamp is the model's."""
    from test_int8_tflite import SPEECH

    g, _ = compile_model(SPEECH, Options(update="full"))
    loss = next(n for n in g.nodes if n.op == "softmax_ce")
    real = next(n for n in g.nodes if loss.inputs[0] in n.outputs)
    head = next(n for n in g.nodes if g.outputs[0] in n.outputs)
    assert real.op == "dense_logits_q8" and real.inputs == head.inputs
    rng = np.random.default_rng(3)
    xs = [rng.integers(-128, 128, g.t(head.inputs[0]).shape).astype(np.int8),
          *(g.t(i).data for i in head.inputs[1:])]
    y8 = get_op("dense_q8").forward(head, xs)[0].astype(np.float32)
    q = g.t(g.outputs[0]).quant
    inside = (y8 > -128) & (y8 < 127)
    assert inside.any()
    assert np.all(np.abs(get_op("dense_logits_q8").forward(real, xs)[0] -
                         (y8 - q.zero_point[0]) * q.scale[0])[inside] <= q.scale[0] / 2 + 1e-6)
    # the same head with a fused ReLU: the loss reads what the clamp leaves
    g0 = import_model(SPEECH, Options())
    relu = tuple(dataclasses.replace(n, attrs={**n.attrs, "act_min": n.attrs["out_offset"]})
                 if g0.outputs[0] in n.outputs else n for n in g0.nodes)
    g1 = add_loss(g0.replace(nodes=relu))
    loss = next(n for n in g1.nodes if n.op == "softmax_ce")
    assert next(n for n in g1.nodes if loss.inputs[0] in n.outputs).op == "dequantize_q8"
