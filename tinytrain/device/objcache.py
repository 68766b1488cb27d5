"""A compiler cache for generated projects: `make CCACHE="python -m tinytrain.device.objcache"`.

Most of a build's compile time goes to the runtime's C files, which are the same from one build
to the next; only model.c and a few firmware files change with the model. The project's Makefile
compiles one source per call with `$(CCACHE) $(CC) ...`, and this wrapper stores each call's
outputs (the object, GCC's .su stack sizes and .ci call graph, which ccache 4.7 does not keep)
under a key of everything that can change them:
- the compiler (its resolved path, size and mtime) and every argument but the macros below;
- the source and each header it can reach through `#include "..."`, by content (every
  candidate on the search path counts, so a header shadowing another is seen);
- a `-DTT_*` macro only when its name occurs in those files: the board's and the twin's builds
  differ in such macros, and the runtime files that never read them are shared.
System headers (`<...>`) come with the compiler and are covered by its identity; with `-g` the
directory is part of the key too, as debug information records it (after any
`-ffile-prefix-map=OLD=NEW` that rewrites it, so builds in different directories can share).
A call the wrapper cannot reason about (no `-c`, several sources, a computed `#include`) runs
uncached.

Set TINYTRAIN_CACHE_DIR to move the cache (default: $XDG_CACHE_HOME/tinytrain/objects) and
TINYTRAIN_CACHE=off to compile everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MAX_CACHE_BYTES = 1 << 30  # trimmed to this, oldest entries first (a hit refreshes an entry)
TRIM_CHANCE = 0.01  # share of stores that check the cache's size (a directory walk)
INCLUDE = re.compile(rb'^\s*#\s*include\s*(?:"([^"]+)"|<[^>]+>|(\S.*))', re.M)
TT_DEFINE = re.compile(r"-D(TT_\w+)(?:=.*)?$")
# options that bring in files the header scan would not follow
PREFIX_MAPS = ("-fdebug-prefix-map=", "-ffile-prefix-map=")
UNTRACKED = {"-I", "-include", "-imacros", "-iquote", "-isystem", "-idirafter", "-x"}


def cache_dir() -> Path:
    """Where entries live: TINYTRAIN_CACHE_DIR, else the user's cache directory."""
    if os.environ.get("TINYTRAIN_CACHE_DIR"):
        return Path(os.environ["TINYTRAIN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory: a cache for this machine's session only
            base = tempfile.gettempdir()
    return Path(base) / "tinytrain" / "objects"


def enabled() -> bool:
    return os.environ.get("TINYTRAIN_CACHE", "on").lower() not in ("off", "0", "no", "false")


def _source_and_output(args: list[str]) -> tuple[str, Path] | None:
    """The one C source a `-c` call compiles and its object, or None if the call is not that."""
    if "-c" not in args:
        return None
    sources = [a for a in args if a.endswith(".c") and not a.startswith("-")]
    if len(sources) != 1:
        return None
    if "-o" in args:
        i = args.index("-o")
        if i + 1 >= len(args):
            return None
        return sources[0], Path(args[i + 1])
    return sources[0], Path(Path(sources[0]).stem + ".o")


def _reachable(source: Path, search: list[Path]) -> dict[Path, bytes] | None:
    """The source and every quoted header it may include (transitively), with their text, or
    None when an include is computed (a macro) and the set cannot be known."""
    seen: dict[Path, bytes] = {}
    todo = [source.resolve()]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen[f] = f.read_bytes()
        for quoted, computed in INCLUDE.findall(seen[f]):
            if computed:
                return None
            if not quoted:
                continue  # <system header>: part of the compiler's identity
            name = quoted.decode()
            for d in [f.parent, *search]:
                if (d / name).is_file():
                    todo.append((d / name).resolve())
    return seen


def key(compiler: str, args: list[str], source: str, out: Path, cwd: Path) -> str | None:
    """The entry's name, or None when the call cannot be cached."""
    found = shutil.which(compiler)
    if found is None:
        return None
    cc = Path(found).resolve()
    if any(a in UNTRACKED for a in args):
        return None
    search = [cwd / a[2:] for a in args if a.startswith("-I")]
    files = _reachable(cwd / source, search)
    if files is None:
        return None
    h = hashlib.sha256()
    st = cc.stat()
    h.update(f"{cc}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for f in sorted(files):
        h.update(f"{f.name}\0{len(files[f])}\0".encode() + files[f])
    text = b"".join(files.values())
    here = cwd.resolve()
    for a in args:
        m = TT_DEFINE.match(a)
        if m and m.group(1).encode() not in text:
            continue  # a TT_ macro nothing here reads (the board's slots, the twin's UART)
        if a.startswith(PREFIX_MAPS):  # counted below as the directory it makes of cwd
            old, _, new = a.partition("=")[2].partition("=")
            if here.is_relative_to(Path(old).resolve()):
                here = Path(new) / here.relative_to(Path(old).resolve())
                continue
        h.update(a.encode() + b"\0")
    if any(a.startswith("-g") and a != "-g0" for a in args):
        h.update(f"cwd={here}\0".encode())  # debug info names the (mapped) directory
    h.update(f"out={out.name}\0".encode())
    return h.hexdigest()


def _outputs(args: list[str], out: Path) -> list[Path]:
    """What the call writes: the object, and GCC's .su and .ci beside it when asked for."""
    stem = out.with_suffix("")
    files = [out]
    if "-fstack-usage" in args:
        files.append(stem.with_suffix(".su"))
    if any(a.startswith("-fcallgraph-info") for a in args):
        files.append(stem.with_suffix(".ci"))
    return files


def _load(entry: Path, files: list[Path]) -> bytes | None:
    """Write a stored entry's outputs and return the compiler's warnings to replay; None if it
    is missing or not what this call makes."""
    try:
        blob = entry.read_bytes()
    except OSError:
        return None
    head, _, body = blob.partition(b"\n")
    try:
        sizes = json.loads(head)
    except ValueError:
        return None
    if [s[0] for s in sizes] != [f.suffix for f in files] + ["stderr"] \
            or sum(s[1] for s in sizes) != len(body):
        return None
    at = 0
    for f, (_, n) in zip(files, sizes):
        f.write_bytes(body[at:at + n])
        at += n
    os.utime(entry)
    return body[at:]


def _store(entry: Path, files: list[Path], stderr: bytes) -> None:
    if not all(f.is_file() for f in files):
        return
    parts = [f.read_bytes() for f in files] + [stderr]
    head = json.dumps([[f.suffix, len(p)] for f, p in zip(files, parts)]
                      + [["stderr", len(stderr)]]).encode()
    entry.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(head + b"\n" + b"".join(parts))
    os.replace(tmp, entry)  # atomic: a parallel build sees the old entry or the whole new one
    if random.random() < TRIM_CHANCE:
        trim(entry.parent.parent)


def trim(root: Path, limit: int = MAX_CACHE_BYTES) -> None:
    """Delete the least recently used entries until the cache holds at most `limit` bytes."""
    entries = []
    for p in root.glob("*/*"):
        try:
            st = p.stat()
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, p))
    total = sum(e[1] for e in entries)
    for _, size, p in sorted(entries):
        if total <= limit:
            break
        p.unlink(missing_ok=True)
        total -= size


def _restore(argv: list[str], cwd: Path) -> tuple[Path, list[Path], bytes | None] | None:
    """Restore a compile call's outputs from the cache: None when it cannot be cached, else its
    entry, its outputs and, on a hit, the warnings to replay (None on a miss)."""
    compiler, args = argv[0], argv[1:]
    call = _source_and_output(args) if enabled() else None
    name = key(compiler, args, *call, cwd) if call else None
    if call is None or name is None:
        return None
    files = [cwd / f for f in _outputs(args, call[1])]
    entry = cache_dir() / name[:2] / name
    return entry, files, _load(entry, files)


def compile_call(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run compile call `argv` (compiler first) in `cwd`, from the cache when an entry matches;
    a miss that succeeds is stored. Output is captured (a hit replays the stored warnings)."""
    got = _restore(argv, cwd)
    if got is None:
        return subprocess.run(argv, cwd=cwd, capture_output=True)
    entry, files, warnings = got
    if warnings is not None:
        return subprocess.CompletedProcess(argv, 0, b"", warnings)
    proc = subprocess.run(argv, cwd=cwd, capture_output=True)
    if proc.returncode == 0:
        try:
            _store(entry, files, proc.stderr)
        except OSError:
            pass  # a full or read-only cache costs speed, never the build
    return proc


def run(argv: list[str]) -> int:
    """Compile `argv` (compiler first) as make's $(CCACHE) wrapper: output passes through."""
    if not argv:
        print("usage: python -m tinytrain.device.objcache CC ARGS...", file=sys.stderr)
        return 2
    proc = compile_call(argv, Path.cwd())
    sys.stdout.buffer.write(proc.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(proc.stderr)
    sys.stderr.flush()
    return proc.returncode


MARK = "@tinytrain-objcache@"  # what `make -n` shows in place of the wrapper


def prefill(project: Path, make_args: list[str]) -> int:
    """Restore, in this process, every object that `make` would compile through $(CCACHE) and
    that the cache holds; make then compiles only the rest. Saves a wrapper process (~0.1 s)
    per cached object. Returns how many objects were restored."""
    if not enabled():
        return 0
    dry = subprocess.run(["make", "-n", *make_args, f"CCACHE={MARK}"], cwd=project,
                         capture_output=True, text=True)
    if dry.returncode != 0:
        return 0
    hits = 0
    for line in dry.stdout.replace("\\\n", " ").splitlines():
        m = re.fullmatch(r"\s*cd (\S+) && " + re.escape(MARK) + r" (.*)", line)
        if not m:
            continue
        cwd = project / m.group(1)
        cwd.mkdir(parents=True, exist_ok=True)
        got = _restore(shlex.split(m.group(2)), cwd)
        if got is not None and got[2] is not None:
            sys.stderr.buffer.write(got[2])
            sys.stderr.flush()
            hits += 1
    return hits


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
