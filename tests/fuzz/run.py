"""The compiler fuzzer: mutate real model files and push each mutant through what
`tinytrain build` does (import, every pass, the memory plan, code generation) and then the C
compiler on the generated model.c with the build's warning flags.

Every mutant must end as one of
  error      a TinyTrainError: `tinytrain build` exits 2 with one message (the contract)
  built      compiled to C that gcc accepts
and never as
  traceback  any other exception (a bug: the user would see a Python traceback)
  c_error    generated C that does not compile
  hang       no verdict within HANG_SECONDS

    python -m tests.fuzz.run --count 2000 --seed 1 [--jobs 2]   # prints the table

tests/test_fuzz.py runs a short seeded run in CI; bench/fuzz.py is the long run.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import resource
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.fuzz.mutate import BYTE_FAMILIES, ONNX_FAMILIES, TFLITE_FAMILIES  # noqa: E402

HANG_SECONDS = 60  # a mutant compiles in well under a second; a minute means a hang
MEMORY_LIMIT = 3 << 30  # bytes of address space per worker: a shape typo must not eat the box
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-c"]
OUTCOMES = ("error", "built", "traceback", "c_error", "hang")


def seed_models(work: Path) -> dict[str, Path]:
    """Real model files: the digits example, TFLite Micro's two int8 models, the recurrent
    examples (PyTorch's GRU and LSTM, Keras's fused LSTM in float and int8) and PyTorch
    exports with depthwise, residual, SE and Gemm layers."""
    out = {"digits_cnn.onnx": ROOT / "examples" / "digits" / "digits_cnn.onnx"}
    for name in ("hello_world_int8.tflite", "micro_speech_quantized.tflite"):
        out[name] = ROOT / "tests" / "fixtures" / name
    for name in ("gru.onnx", "lstm.onnx"):
        out[name] = ROOT / "examples" / "timeseries" / name
    for name in ("tiny_keras_lstm.tflite", "tiny_keras_lstm_int8.tflite"):
        out[name] = ROOT / "examples" / "keras" / name
    try:
        import torch

        from tests.torch_models import MLP, OpsMix, TinyMobileNet, export
    except ImportError:
        return out
    for cls in (MLP, TinyMobileNet, OpsMix):
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[f"{cls.__name__}.onnx"] = export(cls(), work / f"{cls.__name__}.onnx")
    return out


def families(name: str) -> dict:
    own = TFLITE_FAMILIES if name.endswith(".tflite") else ONNX_FAMILIES
    return {**BYTE_FAMILIES, **own}


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _init_worker() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGALRM, _alarm)
    warnings.simplefilter("ignore")


def check(path: Path, work: Path) -> tuple[str, str]:
    """(outcome, detail) of one model file through the build's compile and codegen."""
    from tinytrain.assets import runtime_dirs
    from tinytrain.codegen.render import render
    from tinytrain.errors import TinyTrainError
    from tinytrain.passes.pipeline import Options, compile_model

    signal.alarm(HANG_SECONDS)
    try:
        g, plan = compile_model(path, Options(board="host"))
        files = render(g, plan, "host")
    except TinyTrainError as e:
        return "error", str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    except _Hang:
        return "hang", ""
    except BaseException as e:  # noqa: BLE001 - anything else is the bug being hunted
        tb = traceback.extract_tb(e.__traceback__)
        where = next((f for f in reversed(tb) if "/tinytrain/" in f.filename), tb[-1])
        return "traceback", (f"{type(e).__name__} in {Path(where.filename).name}:"
                             f"{where.name}: {str(e)[:120]}")
    finally:
        signal.alarm(0)
    work.mkdir(parents=True, exist_ok=True)
    for rel in ("model.c", "model.h"):
        (work / rel).write_text(files[rel])
    p = subprocess.run(["gcc", *CFLAGS, f"-I{work}", *(f"-I{d}" for d in runtime_dirs()), "-o",
                        str(work / "model.o"), str(work / "model.c")],
                       capture_output=True, text=True, timeout=HANG_SECONDS)
    if p.returncode != 0:
        err = next((ln for ln in p.stderr.splitlines() if "error" in ln), p.stderr[:200])
        return "c_error", err.split("model.c:", 1)[-1][:200]
    return "built", ""


def _job(args: tuple[str, str, int, int, str]) -> tuple[str, str, str, str]:
    name, path, family, seed, tmp = args[0], args[1], args[2], args[3], args[4]
    rng = np.random.default_rng(seed)
    data = Path(path).read_bytes()
    try:
        mutant = families(name)[family](data, rng)
    except Exception as e:  # noqa: BLE001 - a family that cannot apply to this seed
        return name, family, "skipped", f"{type(e).__name__}: {e}"
    suffix = ".tflite" if name.endswith(".tflite") else ".onnx"
    work = Path(tmp) / f"m{seed}"
    work.mkdir(parents=True, exist_ok=True)
    f = work / f"mutant{suffix}"
    f.write_bytes(mutant)
    outcome, detail = check(f, work / "c")
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return name, family, outcome, detail


def run(count: int, seed: int, jobs: int = 2, work: Path | None = None) -> dict:
    """Fuzz `count` mutants (seeds and families taken round-robin, each mutant seeded by
    `seed`); returns counts per outcome and per family, and the distinct failures."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(work or tmp)
        models = seed_models(base)
        plan = []
        names = sorted(models)
        for k in range(count):
            name = names[k % len(names)]
            fams = sorted(families(name))
            fam = fams[(k // len(names)) % len(fams)]
            plan.append((name, str(models[name]), fam, seed * 1_000_003 + k, tmp))
        results = []
        with cf.ProcessPoolExecutor(jobs, initializer=_init_worker) as pool:
            for r in pool.map(_job, plan, chunksize=4):
                results.append(r)
    counts = collections.Counter(r[2] for r in results)
    by_family: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures: dict[str, list[str]] = collections.defaultdict(list)
    for name, fam, outcome, detail in results:
        by_family[fam][outcome] += 1
        if outcome in ("traceback", "c_error", "hang"):
            failures[f"{outcome}: {detail}"].append(f"{name}/{fam}")
    return {"counts": dict(counts), "by_family": {k: dict(v) for k, v in by_family.items()},
            "failures": dict(failures), "total": len(results)}


def format_report(r: dict) -> str:
    lines = [f"{r['total']} mutants: " + ", ".join(f"{k} {r['counts'].get(k, 0)}"
                                                   for k in (*OUTCOMES, "skipped")), "",
             "| family | " + " | ".join(OUTCOMES) + " |", "|---|" + "---:|" * len(OUTCOMES)]
    for fam, c in sorted(r["by_family"].items()):
        lines.append(f"| {fam} | " + " | ".join(str(c.get(k, 0)) for k in OUTCOMES) + " |")
    if r["failures"]:
        lines += ["", "distinct failures (count, example):"]
        for k, v in sorted(r["failures"].items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(v):5d}  {k}  [{v[0]}]")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    r = run(a.count, a.seed, a.jobs)
    print(format_report(r))
    sys.exit(1 if any(r["counts"].get(k) for k in ("traceback", "c_error", "hang")) else 0)


if __name__ == "__main__":
    main()
