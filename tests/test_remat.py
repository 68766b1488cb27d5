"""Rematerialisation (passes/remat.py, `--remat`): saved activations recomputed in the backward.

The pass may only trade memory for compute: a build with it must train to the same bits as one
without it (int8: bit-identical; fp32: identical, the clones repeat the forward's operations in
the same order), on the host and on a board's twin, over 20 steps, for MobileNetV2 (residual
adds, a row-streamed stem ahead of the trained blocks). The arena must shrink, the recompute
must be counted apart, `auto` must leave a plan that fits alone, and the linked ELF must hold
exactly the planned arena.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tinytrain.passes.pipeline import Options, compile_model, macs

torch = pytest.importorskip("torch")

from tests.mbv2_training import assert_same_training, mbv2_files, train_run  # noqa: E402

STEPS = 20
needs_twin = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="needs gcc-arm-none-eabi and qemu-system-arm (installed by .ci/run)")


def _same(a, b):
    assert_same_training(a, b, STEPS)


@pytest.fixture(scope="module")
def mbv2_64(tmp_path_factory):
    d = tmp_path_factory.mktemp("remat64")
    return mbv2_files(d, 64, STEPS), d


# every bias and the weights of layers 9-40: the stem trains its biases (and streams), the
# blocks after it keep activations for their weight gradients (and recompute them)
DEEP = "tte:n_bias=52,idx={},ratio={}".format("-".join(map(str, range(9, 41))),
                                             "-".join("1" * 32))
INT8 = ("--update", DEEP, "--quantize", "int8")


def test_int8_recomputed_build_trains_bit_identically(mbv2_64, cli):
    path, d = mbv2_64
    q8 = (*INT8, "--calib", d / "calib.npz")
    kept = train_run(cli, path, d, d / "kept", *q8, "--remat", "off")
    remat = train_run(cli, path, d, d / "remat", *q8, "--remat", "100%")
    _same(kept, remat)
    rk, rr = kept[2], remat[2]
    assert rk["remat"] == [] and rk["macs"]["recompute"] == 0
    assert len(rr["remat"]) >= 8 and rr["macs"]["recompute"] > 0
    assert rr["macs"]["forward"] == rk["macs"]["forward"]
    assert rr["macs"]["backward"] == rk["macs"]["backward"]
    assert rr["sram_bytes"]["arena"] < 0.6 * rk["sram_bytes"]["arena"]  # measured: 0.52
    c = (d / "remat" / "model.c").read_text()
    assert "_rc */" in c  # the clones are called in the backward
    # the stem, which trains its biases, streams; the residual adds are recomputed
    info = json.loads((d / "remat" / "program.json").read_text())
    phases = {o["name"]: o["phase"] for o in info["profile_ops"]}
    assert any(o["op"] == "row_stream" for o in info["profile_ops"])
    g, _ = compile_model(path, Options(update=DEEP, quantize="int8", calib=d / "calib.npz",
                                       remat="100%"))
    stage = next(n for n in g.nodes if n.op == "row_stream")
    assert any(g.t(i).kind == "param" and g.t(i).trainable for i in stage.inputs)
    clones = [n for n in g.nodes if n.attrs.get("remat_of")]
    assert any(i.endswith("_Add") for n in clones for i in n.inputs)  # from a residual sum
    assert any(p == "recompute" for p in phases.values())
    assert all(n.endswith("_rc") for n, p in phases.items() if p == "recompute")


@needs_twin
def test_int8_recomputed_build_on_the_twin(mbv2_64, cli):
    """The rematerialised firmware on the STM32F746's twin trains to the host's bits without
    rematerialisation, and its ELF reserves exactly the planned (smaller) arena."""
    path, d = mbv2_64
    q8 = (*INT8, "--calib", d / "calib.npz")
    host = train_run(cli, path, d, d / "host-kept", *q8, "--remat", "off")
    twin = train_run(cli, path, d, d / "twin-remat", *q8, "--remat", "100%", "--board",
                  "stm32f746", qemu=True)
    _same(host, twin)
    r = twin[2]
    assert r["remat"] and r["sram_bytes"]["arena"] < host[2]["sram_bytes"]["arena"]
    assert r["firmware"]["planned_arena"] == r["sram_bytes"]["arena"]
    nm = subprocess.run(["arm-none-eabi-nm", "-S", str(d / "twin-remat" / "firmware.elf")],
                        capture_output=True, text=True, check=True).stdout
    arena = [int(p[1], 16) for p in (ln.split() for ln in nm.splitlines())
             if len(p) == 4 and p[3].endswith("_arena")]
    assert arena == [r["sram_bytes"]["arena"]]


def test_fp32_recomputed_build_trains_identically(tmp_path, cli):
    """fp32 with momentum and weight decay, every layer trained."""
    path = mbv2_files(tmp_path, 32, STEPS)
    args = ("--update", "full", "--momentum", "0.9", "--weight-decay", "0.001")
    kept = train_run(cli, path, tmp_path, tmp_path / "kept", *args, "--remat", "off")
    remat = train_run(cli, path, tmp_path, tmp_path / "remat", *args, "--remat", "100%")
    _same(kept, remat)
    assert remat[2]["sram_bytes"]["arena"] < 0.5 * kept[2]["sram_bytes"]["arena"]


# MobileNetV2-w0.35, int8, 128x128: last:24 needs 374 KB without rematerialisation
TTE_RES = 128


@pytest.fixture(scope="module")
def mbv2_128(tmp_path_factory):
    d = tmp_path_factory.mktemp("remat128")
    return mbv2_files(d, TTE_RES, 2), d


def _compile(path, calib, update, board, remat, max_sram=None):
    opts = Options(update=update, quantize="int8", calib=calib, board=board, remat=remat,
                   max_sram=max_sram)
    from tinytrain.boards import load_board
    from tinytrain.reports.report import memory_report

    g, plan = compile_model(path, opts)
    return g, memory_report(g, plan, load_board(board))


def test_auto_recomputes_only_what_the_board_needs(mbv2_128):
    path, d = mbv2_128
    calib = d / "calib.npz"
    # last:16 fits the F746 as it is: auto changes nothing
    g_off, r_off = _compile(path, calib, "last:16", "stm32f746", "off")
    g_auto, r_auto = _compile(path, calib, "last:16", "stm32f746", "auto")
    assert "remat" not in g_auto.meta and r_auto["sram_bytes"] == r_off["sram_bytes"]
    assert [n.name for n in g_auto.nodes] == [n.name for n in g_off.nodes]
    # ... but not the nRF52840 (256 KB): auto recomputes until it does
    _, r_nrf = _compile(path, calib, "last:16", "nrf52840", "auto")
    assert r_off["sram_bytes"]["total"] > 254 * 1024 >= r_nrf["sram_bytes"]["total"]
    assert 0 < r_nrf["macs"]["recompute"]
    # last:24 fits neither without it; with it, the F746 with the least recompute that fits,
    # less than everything the pass could recompute
    _, r24 = _compile(path, calib, "last:24", "stm32f746", "off")
    _, a24 = _compile(path, calib, "last:24", "stm32f746", "auto")
    _, m24 = _compile(path, calib, "last:24", "stm32f746", "100%")
    assert r24["sram_bytes"]["total"] > 318 * 1024 >= a24["sram_bytes"]["total"]
    assert 0 < a24["macs"]["recompute"] < m24["macs"]["recompute"]
    assert m24["sram_bytes"]["arena"] <= a24["sram_bytes"]["arena"]
    # --max-sram is a budget too, on the host as well
    _, host = _compile(path, calib, "last:24", "host", "auto", max_sram=300 * 1024)
    assert host["sram_bytes"]["total"] <= 300 * 1024 and host["remat"]


def test_a_share_bounds_the_recompute(mbv2_128):
    path, d = mbv2_128
    calib = d / "calib.npz"
    arenas = []
    for share in (0.02, 0.05, 1.0):
        g, r = _compile(path, calib, "last:32", "host", f"{share * 100:g}%")
        m = macs(g)
        assert m["recompute"] <= share * (m["forward"] + m["backward"])
        arenas.append(r["sram_bytes"]["arena"])
    _, off = _compile(path, calib, "last:32", "host", "off")
    assert off["sram_bytes"]["arena"] > arenas[0] >= arenas[1] >= arenas[2]


@needs_twin
def test_a_plan_that_fits_only_with_recompute_links(mbv2_128, cli):
    """`build --board stm32f746` of last:24 succeeds (the linker agrees the program fits);
    with --remat off the same build is refused with the breakdown."""
    path, d = mbv2_128
    q8 = ("--update", "last:24", "--quantize", "int8", "--calib", d / "calib.npz",
          "--board", "stm32f746")
    out = cli("build", path, "--out", d / "fits", *q8).stdout
    assert "recompute" in out and "rematerialised" in out
    r = json.loads((d / "fits" / "report.json").read_text())
    assert r["firmware"]["sram_used"] <= 320 * 1024
    refused = cli("build", path, "--out", d / "refused", *q8, "--remat", "off", check=False)
    assert refused.returncode == 2 and "does not fit" in refused.stderr + refused.stdout


def test_bad_remat_option(mbv2_64, cli):
    path, d = mbv2_64
    p = cli("build", path, "--out", d / "bad", "--remat", "lots", check=False)
    assert p.returncode == 2
    assert "--remat must be auto, off or a percentage" in p.stderr + p.stdout
    assert "Traceback" not in p.stderr

