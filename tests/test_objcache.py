"""The compiler cache (device/objcache.py): a cached build is byte-identical to a full one, and
any change that can alter an object (a header, a macro the file reads) compiles it again."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tinytrain.device import objcache

DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _cli(env: dict[str, str], *args: object) -> None:
    subprocess.run([sys.executable, "-m", "tinytrain", *map(str, args)], env=env, check=True,
                   capture_output=True)


def _entries(cache: Path) -> set[str]:
    return {p.name for p in cache.glob("*/*") if not p.name.startswith(".tmp-")}


def _objects(build: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((build / "obj").glob("*.o"))}


def test_a_cached_build_equals_an_uncached_one(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "TINYTRAIN_CACHE_DIR": str(cache)}
    _cli({**env, "TINYTRAIN_CACHE": "off"}, "build", DIGITS, "--out", tmp_path / "plain")
    assert not cache.exists()  # off means off
    _cli(env, "build", DIGITS, "--out", tmp_path / "first")
    first = _entries(cache)
    assert len(first) == len(_objects(tmp_path / "first"))  # every object stored once
    # another plan of the same model: the runtime's objects come from the cache; only model.c
    # and the firmware files that include its model.h compile again
    _cli(env, "build", DIGITS, "--out", tmp_path / "bias", "--update", "bias")
    after_bias = _entries(cache)
    readers = [f for f in (tmp_path / "bias" / "firmware").glob("*.c")
               if '#include "model.h"' in f.read_text()]
    assert 0 < len(readers) < 6
    assert len(after_bias - first) == 1 + len(readers)
    _cli(env, "build", DIGITS, "--out", tmp_path / "again")
    assert _entries(cache) == after_bias  # all of it served from the cache
    plain, again = _objects(tmp_path / "plain"), _objects(tmp_path / "again")
    assert plain == again
    assert (tmp_path / "plain" / "tt_host").read_bytes() == \
        (tmp_path / "again" / "tt_host").read_bytes()


def _compile(src: Path, cache: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TINYTRAIN_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "tinytrain.device.objcache", "gcc", "-O1",
                           "-Wall", "-fstack-usage", *flags, "-Iinc", "-c",
                           src.name], cwd=src.parent, env=env, capture_output=True, text=True)


def _project(d: Path, source: str) -> Path:
    """f.c with `source` beside inc/k.h (K = 3), the layout _compile's -Iinc expects."""
    (d / "inc").mkdir()
    (d / "inc" / "k.h").write_text("#define K 3\n")
    (d / "f.c").write_text(source)
    return d / "f.c"


def test_headers_and_read_macros_are_part_of_the_key(tmp_path):
    src = _project(tmp_path, '#include "k.h"\n'
                   "int f(int x) { int unused; return x * K + TT_SHIFT; }\n")
    cache = tmp_path / "cache"
    p = _compile(src, cache, "-DTT_SHIFT=1", "-DTT_OTHER=5")
    assert p.returncode == 0 and "unused" in p.stderr  # the compiler's own warning
    obj = (tmp_path / "f.o").read_bytes()
    assert (tmp_path / "f.su").is_file() and len(_entries(cache)) == 1
    (tmp_path / "f.o").unlink()
    (tmp_path / "f.su").unlink()
    # a macro the file never reads does not split the entry; the warning is replayed
    p = _compile(src, cache, "-DTT_SHIFT=1", "-DTT_OTHER=6")
    assert "unused" in p.stderr and (tmp_path / "f.o").read_bytes() == obj
    assert (tmp_path / "f.su").is_file() and len(_entries(cache)) == 1
    assert _compile(src, cache, "-DTT_SHIFT=2").returncode == 0  # one it reads does
    assert len(_entries(cache)) == 2
    (tmp_path / "inc" / "k.h").write_text("#define K 4\n")  # and so does a header's text
    assert _compile(src, cache, "-DTT_SHIFT=2").returncode == 0
    assert len(_entries(cache)) == 3
    assert (tmp_path / "f.o").read_bytes() != obj
    # a failing compile stores nothing and fails the same way
    src.write_text("int f(int x) { return x +; }\n")
    assert _compile(src, cache, "-DTT_SHIFT=2").returncode != 0
    assert len(_entries(cache)) == 3


def test_a_computed_include_is_not_cached(tmp_path):
    src = _project(tmp_path, '#define H "k.h"\n#include H\nint f(int x) { return x * K; }\n')
    cache = tmp_path / "cache"
    assert _compile(src, cache).returncode == 0
    assert (tmp_path / "f.o").is_file()
    assert not cache.exists() or not _entries(cache)


def test_debug_info_keys_on_the_directory_it_records(tmp_path):
    cache = tmp_path / "cache"
    srcs = []
    for d in ("a", "b"):
        (tmp_path / d / "inc").mkdir(parents=True)
        (tmp_path / d / "f.c").write_text("int f(int x) { return x + 1; }\n")
        srcs.append(tmp_path / d / "f.c")
    for src in srcs:  # -g records the directory: two entries
        assert _compile(src, cache, "-g").returncode == 0
    assert len(_entries(cache)) == 2
    for src in srcs:  # unless a prefix map makes both the same: one more, shared
        assert _compile(src, cache, "-g", f"-ffile-prefix-map={src.parent}=.").returncode == 0
    assert len(_entries(cache)) == 3


def test_compile_call_restores_in_process_and_returns_the_warnings(tmp_path, monkeypatch):
    """The API the test harnesses use: a hit writes the object without running the compiler
    and hands back the stored warnings, as the wrapper replays them."""
    monkeypatch.setenv("TINYTRAIN_CACHE_DIR", str(tmp_path / "cache"))
    src = _project(tmp_path, '#include "k.h"\nint f(int x) { int unused; return x * K; }\n')
    argv = ["gcc", "-O1", "-Wall", "-Iinc", "-c", src.name, "-o", "f.o"]
    first = objcache.compile_call(argv, tmp_path)
    assert first.returncode == 0 and b"unused" in first.stderr
    obj = (tmp_path / "f.o").read_bytes()
    (tmp_path / "f.o").unlink()

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"ran {args[0]} on a hit")

    monkeypatch.setattr(objcache.subprocess, "run", no_compiler)
    hit = objcache.compile_call(argv, tmp_path)
    assert hit.returncode == 0 and hit.stderr == first.stderr
    assert (tmp_path / "f.o").read_bytes() == obj
