"""Plain-text `--help` with grouped options and verbatim examples.

The CLI renders help without rich (rich_markup_mode=None: readable in a pipe or a log), where
typer ignores `rich_help_panel`; this command class honours it: options are listed under their
panel's heading, in the order the panels first appear, and the epilog is printed line by line
(examples must not be re-wrapped)."""

from __future__ import annotations

import textwrap
from typing import Any

from typer.core import TyperCommand

OTHER = "Options"  # the heading of options without a panel


class GroupedCommand(TyperCommand):
    def format_options(self, ctx: Any, formatter: Any) -> None:  # click's Context, HelpFormatter
        args: list[tuple[str, str]] = []
        groups: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            rec = param.get_help_record(ctx)
            if rec is None:
                continue
            if param.param_type_name == "argument":
                args.append(rec)
            else:
                groups.setdefault(getattr(param, "rich_help_panel", None) or OTHER, []).append(rec)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        for title in sorted(groups, key=lambda t: t == OTHER):  # --help and unpanelled last
            with formatter.section(title):
                formatter.write_dl(groups[title])

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        if not self.epilog:
            return
        formatter.write_paragraph()
        with formatter.indentation():
            for line in textwrap.dedent(self.epilog).strip("\n").splitlines():
                formatter.write(f"{' ' * formatter.current_indent}{line}\n" if line else "\n")
