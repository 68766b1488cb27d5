"""`tinytrain export-lib`: the CMake export used by a C and a C++ program, two --prefixed models
in one program, the Zephyr module's CMake logic, and the command's refusals.

The reference for every loss is the build's own host program (tt_host over the serial link):
the exported C must train exactly as it does, bit for bit (same compiler, -ffp-contract=off).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.library_helpers import (
    LIB_C,
    STEPS,
    build,
    digits,
    host_losses,
    ir_samples,
    parse,
    torch_model,
    write_samples,
)
from tinytrain.device.runner import HostProgram  # noqa: E402

pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in ("cmake", "gcc", "g++")),
                                reason="needs cmake, gcc and g++")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two different small PyTorch models, built for the host under their own prefixes."""
    from tests.torch_models import MLP, DigitsCNN

    d = tmp_path_factory.mktemp("libexport")
    out = {}
    for prefix, cls, seed in (("mlp", MLP, 1), ("cnn", DigitsCNN, 2)):
        onnx = torch_model(cls, d / f"{prefix}.onnx", seed)
        b = build(onnx, d / f"build_{prefix}", "--prefix", prefix, "--lr", "0.05")
        x, y = digits(STEPS, cls.input_shape)
        out[prefix] = {"build": b, "x": x, "y": y, "ref": host_losses(b, x, y)}
    return out


def _cmake(src, work, *defs: str) -> subprocess.CompletedProcess:
    """Configure and build the project in `src` (Release: the compiler's -O3)."""
    b = work / "cmake-build"
    cfg = subprocess.run(["cmake", "-S", str(src), "-B", str(b), "-DCMAKE_BUILD_TYPE=Release",
                          *defs], capture_output=True, text=True)
    if cfg.returncode != 0:
        return cfg
    return subprocess.run(["cmake", "--build", str(b), "-j", "2"], capture_output=True,
                          text=True)


def _ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, f"{p.args} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def _project(work, body: str) -> None:
    work.mkdir(parents=True, exist_ok=True)
    (work / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(consumer C CXX)\n" + body)


def test_cmake_export_links_into_a_c_and_a_cpp_program(models, tmp_path, cli):
    m = models["mlp"]
    lib = tmp_path / "mlp_cmake"
    cli("export-lib", m["build"], "--format", "cmake", "--out", lib)
    write_samples(tmp_path / "samples.h", "samples", m["build"], m["x"], m["y"])
    defs = 'MODEL=mlp MODEL_UP=MLP MODEL_HEADER="mlp_model.h"'
    _project(tmp_path / "app", f"""
add_subdirectory({lib} mlp)
foreach(main train_c:{LIB_C}/train.c train_cpp:{LIB_C}/train.cpp)
  string(REPLACE ":" ";" parts ${{main}})
  list(GET parts 0 name)
  list(GET parts 1 file)
  add_executable(${{name}} ${{file}})
  target_link_libraries(${{name}} PRIVATE tinytrain::mlp)
  target_include_directories(${{name}} PRIVATE {tmp_path})
  target_compile_definitions(${{name}} PRIVATE {defs})
endforeach()
set_target_properties(train_cpp PROPERTIES CXX_STANDARD 17)
add_executable(example {lib}/example/main.c)
target_link_libraries(example PRIVATE mlp_model)
""")
    _ok(_cmake(tmp_path / "app", tmp_path))
    exe = tmp_path / "cmake-build"
    link = (exe / "CMakeFiles" / "train_cpp.dir" / "link.txt").read_text().split()[0]
    assert Path(link).name in ("c++", "g++"), f"train_cpp was linked by {link}, not g++"
    c, cpp = (parse(_ok(subprocess.run([str(exe / n)], capture_output=True, text=True)))
              for n in ("train_c", "train_cpp"))
    assert c.losses == m["ref"], "the exported C trains differently from the build's tt_host"
    assert cpp.losses == m["ref"]
    assert c.out == cpp.out and len(c.out) == 10
    info = json.loads((m["build"] / "program.json").read_text())
    assert list(c.params) == [t["name"] for t in info["trainable"]]
    assert all(dtype == 0 for dtype, _ in c.params.values())  # MLP_DTYPE_F32
    # the README's example program: trains one sample and its loss falls
    ex = _ok(subprocess.run([str(exe / "example")], capture_output=True, text=True))
    losses = [float(ln.split()[3]) for ln in ex.splitlines() if ln.startswith("step")]
    assert len(losses) == 20 and losses[-1] < 0.1 * losses[0]


def _host_params(build_dir, x, y) -> dict[str, bytes]:
    """The build's own host program trained on x, y: its trained parameters' bytes."""
    xs = ir_samples(build_dir, x)
    with HostProgram(build_dir) as dev:
        for s, t in zip(xs, y, strict=True):
            dev.train(s, np.int32(t))
        return {k: np.ascontiguousarray(v).tobytes() for k, v in dev.get_params().items()}


def test_fused_build_exports_a_fused_runtime(tmp_path, cli):
    """A --fp32-mac fused build (the Cortex-M55 boards' default) exports a runtime whose
    channel-streamed 1x1 sums fuse as the build's do, with no macro from the project: the
    exported C trains as the build's tt_host, bit for bit, which the separate build does not
    (its fp32 1x1 weight gradients round otherwise)."""
    from tests.torch_models import MobileNetV2

    onnx = torch_model(lambda: MobileNetV2(0.35, 32, 10), tmp_path / "mbv2.onnx", 3)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (STEPS, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, STEPS).astype(np.int32)
    builds = {mac: build(onnx, tmp_path / mac, "--prefix", "mb", "--lr", "0.05", "--momentum",
                         "0.9", "--fp32-mac", mac) for mac in ("fused", "separate")}
    assert "tt_cs_pw_weight_sgd_f32" in (builds["fused"] / "model.c").read_text()
    want = _host_params(builds["fused"], x, y)
    separate = _host_params(builds["separate"], x, y)
    assert any(want[k] != separate[k] for k in want)  # the fused sums round otherwise
    lib = tmp_path / "mb_cmake"
    cli("export-lib", builds["fused"], "--format", "cmake", "--out", lib)
    assert "#define TT_F32_FMA 1" in (lib / "runtime" / "tt_reference.h").read_text()
    write_samples(tmp_path / "samples.h", "samples", builds["fused"], x, y)
    defs = 'MODEL=mb MODEL_UP=MB MODEL_HEADER="mb_model.h"'
    _project(tmp_path / "app", f"""
add_subdirectory({lib} mb)
add_executable(train_c {LIB_C}/train.c)
target_link_libraries(train_c PRIVATE tinytrain::mb)
target_include_directories(train_c PRIVATE {tmp_path})
target_compile_definitions(train_c PRIVATE {defs})
""")
    _ok(_cmake(tmp_path / "app", tmp_path))
    run = parse(_ok(subprocess.run([str(tmp_path / "cmake-build" / "train_c")],
                                   capture_output=True, text=True)))
    assert run.losses == host_losses(builds["fused"], x, y)
    assert {k: v for k, (_, v) in run.params.items()} == want, \
        "the exported runtime does not fuse as its build"


def test_two_prefixed_models_train_in_one_program(models, tmp_path, cli):
    libs = {}
    for prefix, m in models.items():
        libs[prefix] = tmp_path / f"{prefix}_cmake"
        cli("export-lib", m["build"], "--format", "cmake", "--out", libs[prefix])
        write_samples(tmp_path / f"{prefix}_samples.h", prefix, m["build"], m["x"], m["y"])
    body = f"""
add_subdirectory({libs['mlp']} mlp)
add_subdirectory({libs['cnn']} cnn)
add_executable(two {LIB_C}/two_models.c)
target_link_libraries(two PRIVATE mlp_model cnn_model)
target_include_directories(two PRIVATE {tmp_path})
"""
    _project(tmp_path / "app", body)
    _ok(_cmake(tmp_path / "app", tmp_path))
    out = _ok(subprocess.run([str(tmp_path / "cmake-build" / "two")], capture_output=True,
                             text=True))
    for prefix, m in models.items():
        got = [int(ln.split()[2], 16) for ln in out.splitlines() if ln.startswith(prefix + " ")]
        assert got == m["ref"], f"{prefix} trains differently beside the other model"
    # one runtime for both; an export from another tinytrain version is refused
    text = (libs["cnn"] / "CMakeLists.txt").read_text()
    (libs["cnn"] / "CMakeLists.txt").write_text(
        text.replace('set(_tt_version "', 'set(_tt_version "0.0.0-other-'))
    p = _cmake(tmp_path / "app", tmp_path / "again")
    assert p.returncode != 0 and "export every model with the same tinytrain version" in \
        " ".join(p.stderr.split())


ZEPHYR_SHIM = """
# The few Zephyr build functions the module uses, as plain CMake (no Zephyr SDK here):
# every zephyr_library is linked into the application whole, as Zephyr does.
function(zephyr_library_named name)
  add_library(${name} STATIC)
  set_property(GLOBAL APPEND PROPERTY SHIM_LIBS ${name})
  set(ZEPHYR_CURRENT_LIBRARY ${name} PARENT_SCOPE)
endfunction()
macro(zephyr_library_sources)
  target_sources(${ZEPHYR_CURRENT_LIBRARY} PRIVATE ${ARGN})
endmacro()
macro(zephyr_library_compile_options)
  target_compile_options(${ZEPHYR_CURRENT_LIBRARY} PRIVATE ${ARGN})
endmacro()
function(zephyr_include_directories)
  foreach(d ${ARGN})
    get_filename_component(a ${d} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    set_property(GLOBAL APPEND PROPERTY SHIM_INCLUDES ${a})
  endforeach()
endfunction()
"""


def test_zephyr_modules_build_two_models(models, tmp_path, cli):
    """The module's CMakeLists.txt and Kconfig, checked with a stand-in for Zephyr's CMake
    functions: both models' modules enabled, one runtime, the program trains as tt_host."""
    libs = {}
    for prefix, m in models.items():
        libs[prefix] = tmp_path / f"{prefix}_zephyr"
        cli("export-lib", m["build"], "--format", "zephyr", "--out", libs[prefix])
        write_samples(tmp_path / f"{prefix}_samples.h", prefix, m["build"], m["x"], m["y"])
        mod = (libs[prefix] / "zephyr" / "module.yml").read_text()
        assert f"name: tinytrain_{prefix}" in mod and "cmake: ." in mod
        assert "kconfig: Kconfig" in mod and (libs[prefix] / "Kconfig").is_file()
        kconfig = (libs[prefix] / "Kconfig").read_text()
        assert f"config TINYTRAIN_{prefix.upper()}\n\tbool" in kconfig
    _project(tmp_path / "app", ZEPHYR_SHIM + f"""
set(CONFIG_TINYTRAIN_MLP y)
set(CONFIG_TINYTRAIN_CNN y)
add_subdirectory({libs['mlp']} mlp)
add_subdirectory({libs['cnn']} cnn)
get_property(libs GLOBAL PROPERTY SHIM_LIBS)
get_property(incs GLOBAL PROPERTY SHIM_INCLUDES)
foreach(l ${{libs}})
  target_include_directories(${{l}} PRIVATE ${{incs}})
endforeach()
add_executable(two {LIB_C}/two_models.c)
target_include_directories(two PRIVATE {tmp_path} ${{incs}})
target_link_libraries(two PRIVATE -Wl,--whole-archive ${{libs}} -Wl,--no-whole-archive m)
file(WRITE ${{CMAKE_BINARY_DIR}}/libs.txt "${{libs}}")
""")
    _ok(_cmake(tmp_path / "app", tmp_path))
    assert (tmp_path / "cmake-build" / "libs.txt").read_text().split(";") == \
        ["tinytrain_runtime", "mlp_model", "cnn_model"]
    out = _ok(subprocess.run([str(tmp_path / "cmake-build" / "two")], capture_output=True,
                             text=True))
    for prefix, m in models.items():
        got = [int(ln.split()[2], 16) for ln in out.splitlines() if ln.startswith(prefix + " ")]
        assert got == m["ref"]


def test_export_lib_refusals_and_replacement(models, tmp_path, cli):
    b = models["mlp"]["build"]
    out = tmp_path / "lib"
    cli("export-lib", b, "--format", "platformio", "--out", out)
    marker = json.loads((out / "tinytrain_export.json").read_text())
    assert marker["prefix"] == "mlp" and marker["format"] == "platformio"
    assert (out / "mlp_model" / "library.json").is_file()
    cli("export-lib", b, "--format", "arduino", "--out", out)  # an earlier export: replaced
    assert not (out / "mlp_model" / "library.json").exists()
    assert (out / "mlp_model" / "library.properties").is_file()
    assert not list(tmp_path.glob(".lib.tt-*")), "temporary directories left behind"

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my work")
    afile = tmp_path / "afile"
    afile.write_text("x")
    old = tmp_path / "old_build"
    shutil.copytree(b, old)
    info = json.loads((old / "program.json").read_text())
    del info["c_prefix"]
    (old / "program.json").write_text(json.dumps(info))
    cases = [
        ((b, "--format", "makefile", "--out", tmp_path / "x"), "--format must be one of"),
        ((tmp_path, "--format", "cmake", "--out", tmp_path / "x"), "not a tinytrain build"),
        ((b, "--format", "cmake", "--out", mine), "is not a tinytrain export"),
        ((b, "--format", "cmake", "--out", afile), "is a file"),
        ((old, "--format", "cmake", "--out", tmp_path / "x"), "rebuild it"),
    ]
    for args, message in cases:
        p = cli("export-lib", *args, check=False)
        assert p.returncode == 2 and message in " ".join(p.stderr.split()), (args, p.stderr)
        assert "Traceback" not in p.stderr
    assert (mine / "notes.txt").read_text() == "my work" and not (tmp_path / "x").exists()


def test_exported_readme_lists_the_header_api(models, tmp_path, cli):
    out = tmp_path / "lib"
    cli("export-lib", models["cnn"]["build"], "--format", "cmake", "--out", out)
    readme = (out / "README.md").read_text()
    header = (out / "cnn" / "cnn_model.h").read_text()
    api = readme.split("## API", 1)[1].split("```c\n", 1)[1].split("```", 1)[0]
    declared = re.findall(r"^[^#/ ].*?\b(cnn_\w+)\(", header, re.M)
    assert re.findall(r"\b(cnn_\w+)\(", api) == declared
    assert {"cnn_init", "cnn_train_step", "cnn_infer", "cnn_set_lr", "cnn_set_momentum",
            "cnn_set_weight_decay", "cnn_get_lr", "cnn_trainable"} <= set(declared)
    assert '#include "cnn_model.h"' in (out / "cnn" / "cnn_model.c").read_text()
    assert "-ffp-contract=off" in readme and "add_subdirectory" in readme
