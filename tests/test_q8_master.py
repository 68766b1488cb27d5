"""`--rounding master`: the shadow's update, with the forward and the input gradient of a weight
trained whole reading its 16-bit master 256 w + s instead of w.

The numpy reference (ops/conv2d_q8.py, dense_q8.py) is checked against PyTorch's float64
convolution over the exact integers; the C kernels (runtime_c/reference/tt_q8_master.c,
the optimised ones at the end of runtime_c/optimized/tt_q8_conv_opt.c) against numpy bit for
bit on the host and the twins; whole builds through the CLI: the C training against the
numpy simulation, `infer --state` reading the saved shadows, export writing the master, and the
IR check that no pass leaves a reader without its shadow."""

from __future__ import annotations

import re
import shutil
import struct

import numpy as np
import pytest
from conftest import tinytrain

from tests import ckernel
from tinytrain.errors import CompileError
from tinytrain.ir import Node
from tinytrain.ops import get_op
from tinytrain.ops.conv2d_q8 import requantize
from tinytrain.passes.optimizer import SGDConfig
from tinytrain.passes.pipeline import Options, compile_model
from tinytrain.passes.verify import verify

torch = pytest.importorskip("torch")

# float32 sums of up to 640 products in C against numpy's float64 sums, relative to the
# largest |dx| of the case
DX_RTOL = 2e-5
# (name, h, w, cin, cout, kernel, stride, pad, groups); "dense" reads cin -> cout
# (the pointwise and dense ones take the optimised kernels' 4-input steps, and a tail)
CASES = [("pw", 4, 4, 24, 16, 1, 1, 0, 1), ("pw_tail", 3, 5, 23, 7, 1, 1, 0, 1),
         ("k3s2", 7, 7, 5, 6, 3, 2, 1, 1), ("dw", 6, 6, 8, 8, 3, 1, 1, 8),
         ("grouped", 5, 5, 6, 4, 3, 1, 1, 2), ("deep", 2, 2, 640, 4, 1, 1, 0, 1),
         ("dense", 1, 1, 701, 10, 1, 1, 0, 1)]


def _case(spec: tuple, seed: int) -> tuple[Node, list[np.ndarray], np.ndarray]:
    """A conv2d_q8 / dense_q8 node reading its master, its inputs (x, w, b, shadow) and a dy.
    The 'deep' and 'dense' cases take extreme values: their sums leave int32."""
    name, h, w, cin, cout, k, s, p, groups = spec
    rng = np.random.default_rng(seed)
    extreme = name in ("deep", "dense")
    x = (rng.choice([-128, 127], (h, w, cin)) if extreme
         else rng.integers(-128, 128, (h, w, cin))).astype(np.int8)
    wshape = (cout, cin) if name == "dense" else (cout, k, k, cin // groups)
    wq = (np.full(wshape, 127) * rng.choice([-1, 1], wshape) if extreme
          else rng.integers(-127, 128, wshape)).astype(np.int8)
    sh = rng.integers(0, 256, wshape).astype(np.uint8)
    b = rng.integers(-5000, 5000, cout).astype(np.int32)
    attrs = {"in_offset": int(rng.integers(-127, 129)), "out_offset": int(rng.integers(-20, 20)),
             "act_min": -128, "act_max": 127, "w_scale": [(i + 1) / 128 for i in range(cout)],
             "master": True, "kernel": (k, k), "stride": (s, s), "pads": (p, p, p, p),
             "dilation": (1, 1), "groups": groups}
    op = "dense_q8" if name == "dense" else "conv2d_q8"
    node = Node(name, op, ("x", "w", "b", "w_shadow"), ("y",), {**attrs, "mult": [1 << 30],
                "shift": [0]})
    acc = _torch_acc(node, [x, wq, b, sh])  # scale the outputs to span int8
    shift = -int(np.ceil(np.log2(max(np.abs(acc).max(), 1) / 100.0)))
    attrs["mult"] = [int(v) for v in rng.integers(1 << 30, 1 << 31, cout)]
    attrs["shift"] = [min(shift, 0)] * cout
    node = Node(name, op, node.inputs, node.outputs, attrs)
    y_shape = get_op(op).infer(node, [x.shape, wq.shape])[0]
    dy = rng.standard_normal(y_shape).astype(np.float32)
    return node, [x, wq, b, sh], dy


def _torch_acc(node: Node, xs: list[np.ndarray]) -> np.ndarray:
    """round_half_up(sum (x + in_offset) (w + s/256) + b), the int8 layer's accumulators over
    the master, from PyTorch's float64 conv of the exact integers (all below 2^53)."""
    a = node.attrs
    x = torch.tensor(xs[0].astype(np.float64) + a["in_offset"])
    m = torch.tensor(xs[1].astype(np.float64) * 256 + xs[3])
    b = torch.tensor(xs[2].astype(np.float64) * 256)
    if node.op == "dense_q8":
        v = m @ x.reshape(-1) + b
    else:
        p = a["pads"][0]
        v = torch.nn.functional.conv2d(x.permute(2, 0, 1)[None], m.permute(0, 3, 1, 2), b,
                                       stride=a["stride"], padding=p, groups=a["groups"])
        v = v[0].permute(1, 2, 0)
    return np.floor((v.numpy() + 128) / 256).astype(np.int64)


@pytest.mark.parametrize("spec", CASES, ids=[c[0] for c in CASES])
def test_numpy_forward_is_the_rounded_master_sum(spec) -> None:
    node, xs, _ = _case(spec, 1)
    y = get_op(node.op).forward(node, xs)[0]
    want = requantize(_torch_acc(node, xs), node.attrs, double_rounding=node.op == "conv2d_q8")
    assert np.array_equal(y.reshape(want.shape), want)
    # a zero shadow is the plain int8 layer
    plain = Node(node.name, node.op, node.inputs[:3], node.outputs,
                 {**node.attrs, "master": False})
    zero = [*xs[:3], np.zeros_like(xs[3])]
    assert np.array_equal(get_op(node.op).forward(node, zero)[0],
                          get_op(node.op).forward(plain, xs[:3])[0])


def _c_array(ctype: str, name: str, v: np.ndarray) -> str:
    if v.dtype == np.float32:
        body = ", ".join(f"{struct.unpack('<f', struct.pack('<f', f))[0]!r}f" for f in v.ravel())
    else:
        body = ", ".join(str(int(i)) for i in v.ravel())
    return f"static const {ctype} {name}[{max(v.size, 1)}] = {{{body}}};\n"


def _header(cases: list[tuple[Node, list[np.ndarray], np.ndarray]]) -> str:
    out, rows, sizes = [], [], {"y": 1, "x": 1, "w": 1}
    for k, (node, xs, dy) in enumerate(cases):
        a, op = node.attrs, get_op(node.op)
        y = op.forward(node, xs)[0]
        bwd = get_op(node.op.replace("_q8", "_backward_input_q8"))
        dnode = Node("d", bwd.name, ("dy", "w", "w_shadow"), ("dx",),
                     {**a, "out_shape": xs[0].shape if node.op == "conv2d_q8"
                      else (xs[0].size,)})
        dx = bwd.forward(dnode, [dy, xs[1], xs[3]])[0]
        for tag, ctype, v in (("x", "int8_t", xs[0]), ("w", "int8_t", xs[1]),
                              ("s", "uint8_t", xs[3]), ("b", "int32_t", xs[2]),
                              ("y", "int8_t", y), ("dy", "float", dy), ("dx", "float", dx),
                              ("mult", "int32_t", np.array(a["mult"])),
                              ("shift", "int32_t", np.array(a["shift"]))):
            out.append(_c_array(ctype, f"c{k}_{tag}", np.asarray(v)))
        sizes = {"y": max(sizes["y"], y.size), "x": max(sizes["x"], xs[0].size),
                 "w": max(sizes["w"], xs[1].size)}
        h, w, cin = xs[0].shape if node.op == "conv2d_q8" else (1, 1, xs[0].size)
        oh, ow, cout = y.shape if node.op == "conv2d_q8" else (1, 1, y.size)
        kh, sh, p, groups = a["kernel"][0], a["stride"][0], a["pads"][0], a["groups"]
        geo = f"{{{h}, {w}, {cin}, {oh}, {ow}, {cout}, {kh}, {kh}, {sh}, {sh}, {p}, {p}, 1, 1, " \
              f"{groups}}}"
        rq = f"{{{a['in_offset']}, {a['out_offset']}, -128, 127, c{k}_mult, c{k}_shift}}"
        rows.append(f'    {{"{node.name}", {int(node.op == "dense_q8")}, {geo}, {rq}, c{k}_x, '
                    f"c{k}_w, c{k}_s, c{k}_b, c{k}_y, c{k}_dy, c{k}_dx}},")
    return (f"#define N_CASES {len(cases)}\n#define MAX_Y {sizes['y']}\n"
            f"#define MAX_X {sizes['x']}\n#define MAX_W {sizes['w']}\n" + "".join(out)
            + "static const master_case CASES[N_CASES] = {\n" + "\n".join(rows) + "\n};\n")


def _f(bits: str) -> float:
    return struct.unpack("<f", struct.pack("<I", int(bits, 16)))[0]


@pytest.mark.parametrize("target", ckernel.every_target())
def test_the_c_kernels_are_the_numpy_ones(target, tmp_path) -> None:
    (tmp_path / "master_cases.h").write_text(_header([_case(c, 7) for c in CASES]))
    prog = tmp_path / "test_master.c"
    shutil.copy(ckernel.HERE / "test_master.c", prog)
    r = ckernel.run(prog, target, tmp_path, sources=[
        ckernel.RUNTIME[f] for f in ("tt_q8_master.c", "tt_q8_conv_opt.c", "tt_q8_mve.c",
                                     "tt_q8_stem_mve.c", "tt_q8_core.c")])
    assert r.returncode == 0 and "done" in r.stdout, r.stdout[-2000:]
    found = re.findall(r"case (\S+) fwd (\d+) zero (\d+) bwd_zero (\d+) err (\S+) top (\S+)",
                       r.stdout)
    assert [f[0] for f in found] == [c[0] for c in CASES]
    for name, fwd, zero, bwd_zero, err, top in found:
        assert (fwd, zero, bwd_zero) == ("0", "0", "0"), name
        assert _f(err) <= DX_RTOL * _f(top), (name, _f(err), _f(top))


def test_every_reader_of_a_master_reads_its_shadow(tmp_path) -> None:
    """Every node that reads a weight trained whole carries its shadow after all passes (the
    pipeline verifies it after each), a partial weight keeps the floored read, and a node
    that lost its shadow is an IR error."""
    from test_int8_tflite import SPEECH

    g, _ = compile_model(SPEECH, Options(update="full", sgd=SGDConfig(rounding="master")))
    masters = g.meta["master_read"]
    assert len(masters) == 2  # the conv's and the FC's weights
    readers = [n for n in g.nodes for w in masters if w in n.inputs]
    assert {n.op for n in readers} >= {"conv2d_q8", "dense_q8", "dense_backward_input_q8"}
    assert all(masters[w] in n.inputs for n in readers for w in masters if w in n.inputs)
    node = next(n for n in g.nodes if n.op == "dense_q8" and n.attrs.get("master"))
    lost = Node(node.name, node.op, node.inputs[:-1], node.outputs,
                {**node.attrs, "master": False})
    with pytest.raises(CompileError, match="without its master"):
        verify(g.replace(nodes=tuple(lost if n is node else n for n in g.nodes)))
    plan = tmp_path / "plan.toml"  # a quarter of the FC's input channels
    plan.write_text("[[layer]]\nindex = 1\nweight = 0.25\nbias = false\n")
    g, _ = compile_model(SPEECH, Options(update=str(plan), sgd=SGDConfig(rounding="master")))
    assert "master_read" not in g.meta and not any(n.attrs.get("master") for n in g.nodes)


def test_infer_and_export_read_the_trained_master(tmp_path) -> None:
    """After `run --save`, `infer --state` reads the saved shadows as the trained device did
    (the parameters alone give other outputs), and `export` writes each trained weight as
    its master rounded to the nearest int8."""
    from test_int8_tflite import SPEECH, _speech, as_real, reference

    from tinytrain.device import state_file
    from tinytrain.device.data import load_npz
    from tinytrain.device.runner import open_program
    from tinytrain.device.train import infer_all

    out = tmp_path / "b"
    built = tinytrain("build", SPEECH, "--out", out, "--update", "last:1", "--rounding",
                      "master", "--lr", "0.01")
    assert "int8 master: 1 trained weights read their 16-bit master" in built.stdout
    d = _speech(tmp_path / "d.npz", 60, 3)
    tinytrain("run", out, "--data", d, "--epochs", "2", "--shuffle", "--save", tmp_path / "s.npz")
    saved = state_file.read(tmp_path / "s.npz")
    (w, sh), = _master_read(out).items()
    assert saved.state is not None and saved.state[sh].any()  # sub-LSB fractions were kept
    it = reference(SPEECH)  # inputs far from the classes: outputs short of saturation
    q = np.random.default_rng(5).integers(-128, 128, (40, 1960)).astype(np.int8)
    np.savez(tmp_path / "n.npz", x=as_real(it, q))
    d = tmp_path / "n.npz"
    tinytrain("infer", out, "--data", d, "--state", tmp_path / "s.npz", "--out", tmp_path / "y.npy")
    state_file.write(tmp_path / "p.npz", saved.params, None)
    tinytrain("infer", out, "--data", d, "--state", tmp_path / "p.npz", "--out", tmp_path / "p.npy")
    with open_program(out) as prog:  # the trained device's own state
        prog.set_params(saved.params)
        prog.set_state(saved.state)
        x, _ = load_npz(d, prog.info, need_y=False)
        trained = infer_all(prog, x, lambda *_: None)
    y = np.load(tmp_path / "y.npy")
    assert np.array_equal(y.reshape(trained.shape), trained)
    assert not np.array_equal(np.load(tmp_path / "p.npy"), y)  # the floor is another model

    tinytrain("export", out, "--state", tmp_path / "s.npz", "--out", tmp_path / "t.tflite")
    master = saved.params[w].astype(np.int64) * 256 + saved.state[sh]
    want = np.clip((master + 128) >> 8, -127, 127)
    assert not np.array_equal(want, saved.params[w])  # rounding up happened somewhere
    assert np.array_equal(_exported(out, tmp_path / "t.tflite", w), want)


def _master_read(build) -> dict[str, str]:
    from tinytrain.device.runner import load_program_info

    return load_program_info(build)["master_read"]


def _exported(build, model, name: str) -> np.ndarray:
    """The trained parameter `name` as the exported .tflite holds it, in the build's layout."""
    from test_int8_tflite import reference

    from tinytrain.device.runner import load_program_info

    p = next(t for t in load_program_info(build)["trainable"] if t["name"] == name)
    it = reference(model)
    d = next(t for t in it.get_tensor_details() if t["name"] == p["source"]["node"])
    return it.get_tensor(d["index"]).reshape(p["shape"]).astype(np.int64)
