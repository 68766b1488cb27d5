"""The documentation site: it builds with --strict, every `tinytrain` command it (or the README)
shows exists with every option it uses, and it holds everything the long README held."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import typer
from typer.testing import CliRunner

from tinytrain.boards import available as available_boards
from tinytrain.cli.main import app
from tinytrain.ops import public_ops

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

# The `#`, `##` and `###` headings of README.md as it was before its content moved into the site
# (`git show 9313f3e:README.md`). Each must stay a heading of some page, so no section was lost.
OLD_README_HEADINGS = (
    "tinytrain",
    "Two commands",
    "Installing the package",
    "The command line",
    "Where the memory goes",
    "Python API",
    "Using the generated C as a library",
    "Update plans (`--update`)",
    "What the memory passes do",
    "Rematerialisation and streaming that trains",
    "Automatic update plans",
    "A fleet: federated training with Flower",
    "Supported ONNX ops",
    "int8 models",
    "TTE's own models on the boards",
    "Training speed on the boards",
    "Measured numbers",
    "Boards, QEMU twins and the serial link",
    "How it works",
    "Generated-C contract",
    "Kernels: reference and optimised",
    "Adding an op",
    "Adding a board",
    "Development",
)
# Reworded headings: old heading -> the page heading that holds its text (none so far).
RENAMED: dict[str, str] = {}
# The old README's one other `#` line is a comment inside its Python example, not a heading;
# the example moved whole (guides/python-api.md), so the comment must be there as text.
OLD_README_CODE_COMMENTS = (
    "# built with: tinytrain build examples/digits/digits_cnn.onnx --out out/online --lr 0.05 "
    "--momentum 0.5",
)
SHELL_SEPARATORS = {"|", "||", "&&", ";", ">", ">>", "<"}
# Commands cheap enough to run for real, as a user would (a subprocess each).
RUN_FOR_REAL = {("--version",), ("version",), ("ops",), ("boards",)}


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def code_blocks(text: str) -> Iterator[str]:
    """The contents of the fenced code blocks of a Markdown text."""
    for m in re.finditer(r"^ *```[^\n]*\n(.*?)^ *```", text, re.S | re.M):
        yield m.group(1)


def non_code_lines(text: str) -> Iterator[str]:
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            yield line


def commands_in(text: str) -> Iterator[str]:
    """Every `tinytrain ...` command line of the text's code blocks, continuations joined."""
    for block in code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() == "tinytrain" or line.strip().startswith("tinytrain "):
                yield " ".join(line.split())


def doc_commands() -> list[tuple[str, str]]:
    """(file, command) for the README and every page."""
    return [(str(p.relative_to(ROOT)), c) for p in [README, *pages()]
            for c in commands_in(p.read_text())]


def resolve(line: str, root: click.Command) -> tuple[list[str], list[str]]:
    """The command path a `tinytrain ...` line names in the Click tree, and what is wrong with
    the line: a command that does not exist, or an option its command lacks."""
    tokens = shlex.split(line, comments=True)
    assert tokens[:1] == ["tinytrain"], line
    args = tokens[1:]
    for k, tok in enumerate(args):  # stop at a pipe or redirection: the rest is not ours
        if tok in SHELL_SEPARATORS:
            args = args[:k]
            break
    path, cmd, problems = ["tinytrain"], root, []
    while isinstance(cmd, click.Group) and args and not args[0].startswith("-"):
        sub = cmd.commands.get(args[0])
        if sub is None:
            problems.append(f"`{' '.join(path)}` has no command {args[0]!r}")
            return path, problems
        path.append(args.pop(0))
        cmd = sub
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    for tok in args:
        if tok.startswith("-") and tok != "-" and not re.fullmatch(r"-\d.*", tok):
            name = tok.split("=", 1)[0]
            if name not in known:
                problems.append(f"`{' '.join(path)}` has no option {name}")
    return path, problems


@pytest.fixture(scope="module")
def cli_root() -> click.Command:
    return typer.main.get_command(app)


def test_checker_catches_what_the_cli_lacks(cli_root: click.Command) -> None:
    """The checker itself: made-up lines fail, real ones pass."""
    assert resolve("tinytrain build model.onnx --board host --no-such-flag", cli_root)[1]
    assert resolve("tinytrain fleet simulate --build b --data p.npz --out o --bogus 3",
                   cli_root)[1]
    assert resolve("tinytrain frobnicate build/x", cli_root)[1]
    assert resolve("tinytrain fleet launch x", cli_root)[1]
    assert resolve("tinytrain run b --shufle", cli_root)[1]
    ok = ["tinytrain build m.onnx --board stm32f746 --out=o --no-memory-passes -o x",
          "tinytrain fleet simulate --build a --build b --data p.npz --out o  # comment --x",
          "tinytrain ops | head", "tinytrain --version"]
    for line in ok:
        assert resolve(line, cli_root)[1] == [], line
    assert resolve("tinytrain fleet app out", cli_root)[0] == ["tinytrain", "fleet", "app"]


def test_commands_in_the_docs_exist(cli_root: click.Command) -> None:
    found = doc_commands()
    assert len(found) > 30, "the docs' code blocks should show the commands in use"
    problems = [f"{src}: {line}: {p}" for src, line in found for p in resolve(line, cli_root)[1]]
    assert not problems, "\n".join(problems)


def test_commands_in_the_docs_run(cli_root: click.Command) -> None:
    """Every command the docs use answers --help; the cheap ones run for real, from a fresh
    process through the package's entry point."""
    paths = {tuple(resolve(line, cli_root)[0][1:]) for _, line in doc_commands()}
    assert ("fleet", "simulate") in paths and ("build",) in paths
    runner = CliRunner()
    for path in sorted(paths | {()}):
        r = runner.invoke(app, [*path, "--help"])
        assert r.exit_code == 0, f"tinytrain {' '.join(path)} --help: {r.output}"
    real = {tuple(shlex.split(line, comments=True)[1:]) for _, line in doc_commands()}
    for args in sorted((real & RUN_FOR_REAL) | {("--help",)}):
        r = subprocess.run([sys.executable, "-m", "tinytrain", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"tinytrain {' '.join(args)}: {r.stderr}"


def headings() -> set[str]:
    """Every heading (any level) of every page, without a trailing `{#id}`."""
    found = set()
    for p in pages():
        for line in non_code_lines(p.read_text()):
            m = re.match(r"#{1,6} (.+?)(?:\s+\{[^}]*\})?\s*$", line)
            if m:
                found.add(m.group(1))
    return found


def test_the_old_readme_is_all_in_the_site() -> None:
    have = headings()
    missing = [h for h in OLD_README_HEADINGS if RENAMED.get(h, h) not in have]
    assert not missing, f"README sections with no page heading in docs/: {missing}"
    text = "\n".join(p.read_text() for p in pages())
    for comment in OLD_README_CODE_COMMENTS:
        assert comment in text


def test_readme_fits_a_screen_and_links_into_the_site() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in links if "://" not in t]
    assert any(t.startswith("docs/") for t in local)
    assert [t for t in local if not (ROOT / t).exists()] == []


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")
BENCH_INDEX = DOCS / "benchmarks" / "index.md"


def test_every_picture_exists_and_has_its_command() -> None:
    """An image the docs show is there, and every picture in docs/ is one that a command of
    the benchmarks' table makes (its row names the file), so none is drawn by hand."""
    missing = [f"{p.relative_to(ROOT)}: {src}" for p in [README, *pages()]
               for src in IMAGE.findall(p.read_text())
               if "://" not in src and not (p.parent / src).is_file()]
    assert not missing, f"images that do not exist: {missing}"
    rows = [ln for ln in BENCH_INDEX.read_text().splitlines() if ln.startswith("| `")]
    pngs = sorted(p.relative_to(ROOT).as_posix() for p in DOCS.rglob("*.png"))
    assert pngs, "docs/ should hold the pictures the pages show"
    orphans = [p for p in pngs if not any(f"`{p}`" in row for row in rows)]
    assert not orphans, f"pictures no command of {BENCH_INDEX.name}'s table makes: {orphans}"
    named = {m for row in rows for m in re.findall(r"`(docs/[^`]+\.png)`", row)}
    assert named <= set(pngs), f"pictures the table names but docs/ lacks: {named - set(pngs)}"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (pip install -e '.[docs]')")
def test_site_builds_strict(tmp_path: Path, cli_root: click.Command) -> None:
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                        str(site)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    # the generated references hold every command, op and board of the code
    cli = (site / "reference/cli/index.html").read_text()

    def walk(cmd: click.Command, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    for path in walk(cli_root, ["tinytrain"]):
        assert f'id="{"-".join(path)}"' in cli, path
    assert "--no-memory-passes" in cli and "--server-momentum" in cli
    ops = (site / "reference/ops/index.html").read_text()
    assert all(f"<code>{op.name}</code>" in ops for op in public_ops())
    boards = (site / "reference/boards/index.html").read_text()
    assert all(f"<code>{b}</code>" in boards for b in available_boards())
    assert "OnlineModel" in (site / "reference/python/index.html").read_text()
