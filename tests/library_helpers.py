"""Shared by tests/test_library_*.py: small models built under a --prefix, their samples as a
C header, the losses of a build's own host program (the reference), and the C / C++ programs
of tests/c/library/ compiled against a generated model, with their output parsed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.conftest import ROOT, tinytrain
from tinytrain.device import objcache
from tinytrain.device.link.device import quantize_input
from tinytrain.device.runner import HostProgram, load_program_info

LIB_C = ROOT / "tests" / "c" / "library"
CKERNEL = ROOT / "tests" / "ckernel"
DIGITS_ONNX = ROOT / "examples" / "digits" / "digits_cnn.onnx"
# What templates/Makefile.j2 compiles the model with on the host.
HOST_CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off")
STEPS = 24  # training steps compared: the PyTorch parity tests' bar is at least 20


def digits(n: int, shape: tuple[int, ...], start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n UCI digits (scikit-learn's copy, no download) in [0, 1], shaped for the model."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images[start:start + n] / 16.0).astype(np.float32).reshape((n, *shape))
    return x, d.target[start:start + n].astype(np.int32)


def torch_model(cls, path: Path, seed: int = 0) -> Path:
    """Export an untrained tests.torch_models class to ONNX with seeded weights."""
    import torch

    from tests.torch_models import export

    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter on purpose
        return export(cls(), path)


def build(model: Path, out: Path, *args: str) -> Path:
    """`tinytrain build MODEL --out OUT ARGS` (host unless ARGS say otherwise)."""
    tinytrain("build", model, "--out", out, *args)
    return out


def ir_samples(build_dir: Path, x: np.ndarray) -> np.ndarray:
    """Samples in the model's IR order (NHWC) and input dtype: what its C API takes."""
    info = load_program_info(build_dir)
    perm = info["input_perm"]
    x = np.transpose(x, (0, *(int(p) + 1 for p in perm))).reshape(len(x), -1)
    if info["input_dtype"] == "s8":
        return np.stack([quantize_input(s, info["input_quant"]) for s in x])
    return np.ascontiguousarray(x, np.float32)


def write_samples(path: Path, name: str, build_dir: Path, x: np.ndarray, y: np.ndarray) -> Path:
    """A C header with <name>_x (samples, IR order, input dtype), <name>_y (int32 labels) as
    bytes and <NAME>_N."""
    xs = ir_samples(build_dir, x)

    def arr(sym: str, raw: bytes) -> str:
        body = ",".join(str(b) for b in raw)
        return f"static const unsigned char {sym}[{len(raw)}] = {{{body}}};\n"

    path.write_text(f"#define {name.upper()}_N {len(xs)}\n" + arr(f"{name}_x", xs.tobytes())
                    + arr(f"{name}_y", np.asarray(y, "<i4").tobytes()))
    return path


def f32_bits(values) -> list[int]:
    return [int(v) for v in np.asarray(values, np.float32).view(np.uint32)]


def host_losses(build_dir: Path, x: np.ndarray, y: np.ndarray) -> list[int]:
    """The build's own host program (tt_host over the serial link), sample by sample: the
    float32 bits of each loss."""
    xs = ir_samples(build_dir, x)
    with HostProgram(build_dir) as dev:
        return f32_bits([dev.train(s, np.int32(t))[0] for s, t in zip(xs, y)])


@dataclass
class Run:
    """What a tests/c/library program printed."""
    losses: list[int] = field(default_factory=list)  # float32 bits, one per step
    out: list[int] = field(default_factory=list)  # the first sample's outputs after training
    params: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # name: (dtype, bytes)
    sets: dict[str, tuple[int, int]] = field(default_factory=dict)  # what: (return, getter)

    def loss_values(self) -> np.ndarray:
        return np.array(self.losses, np.uint32).view(np.float32)


def parse(stdout: str) -> Run:
    r = Run()
    for line in stdout.splitlines():
        kind, *rest = line.split()
        if kind == "loss":
            assert int(rest[0]) == len(r.losses), line
            r.losses.append(int(rest[1], 16))
        elif kind == "out":
            r.out = [int(v, 16) for v in rest]
        elif kind == "param":
            r.params[rest[0]] = (int(rest[1]), bytes.fromhex(rest[2]))
        elif kind == "set":
            r.sets[rest[0]] = (int(rest[1]), int(rest[2], 16))
    return r


def model_defines(prefix: str, header: str) -> list[str]:
    """How train.c / train.cpp find the model's names."""
    return [f"-DMODEL={prefix}", f"-DMODEL_UP={prefix.upper()}", f'-DMODEL_HEADER="{header}"']


# Objects of the runtime kernels, which every build of this tinytrain holds identical: keyed
# by the source and its directory's headers, so each is compiled once per worker and session.
_RUNTIME_OBJECTS: dict[str, Path] = {}


def _runtime_key(src: Path) -> str:
    h = hashlib.sha1(src.read_bytes())
    for header in sorted(src.parent.glob("*.h")):
        h.update(header.name.encode() + header.read_bytes())
    return h.hexdigest()


def compile_host(exe: Path, sources: list[Path], includes: list[Path], flags: list[str]) -> Path:
    """gcc for C files, g++ (and the link) when a .cpp is among the sources. Compiles go through
    the compiler cache (tinytrain.device.objcache) with paths relative to the executable's
    directory, which keeps its key the same across sessions."""
    cxx = any(s.suffix == ".cpp" for s in sources)
    here = exe.parent

    def rel(p: Path) -> str:
        return os.path.relpath(p, here)

    objs = []
    for s in sources:
        runtime = s.parent.name == "runtime"
        key = _runtime_key(s) if runtime else ""
        if key in _RUNTIME_OBJECTS:
            objs.append(str(_RUNTIME_OBJECTS[key]))
            continue
        o = f"{exe.name}_{s.parent.name}_{s.stem}.o"
        cmd = (["g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"] if s.suffix == ".cpp"
               else ["gcc", *HOST_CFLAGS])
        cmd += [*flags, *(f"-I{rel(i)}" for i in includes), "-c", rel(s), "-o", o]
        p = objcache.compile_call(cmd, here)
        assert p.returncode == 0, f"{' '.join(cmd)} failed:\n{p.stderr.decode()}"
        objs.append(str(here / o))
        if runtime:
            _RUNTIME_OBJECTS[key] = here / o
    _run(["g++" if cxx else "gcc", "-o", str(exe), *objs, "-lm"])
    return exe


def run(exe: Path, *args: str) -> Run:
    return parse(_run([str(exe), *args]).stdout)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p
