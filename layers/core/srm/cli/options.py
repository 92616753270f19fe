"""What both CLIs spell the same way: a command documented by its handler's docstring, ``--json``, ``--timeout``."""

from __future__ import annotations

import argparse
import inspect
import math
from collections.abc import Callable
from typing import Any

__all__ = ["add_command", "add_json", "add_timeout", "positive_seconds"]


class _Formatter(argparse.HelpFormatter):
    """argparse's, 100 columns wide: a command's usage line stays one line above its error (80 wraps it)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=100)


def add_command(subparsers: Any, name: str, handler: Callable[..., int], **options: Any) -> argparse.ArgumentParser:
    """The command ``name``, run by ``handler`` and documented by its docstring: the first paragraph is the command's
    line in the list of commands, the rest (if any) the description its ``--help`` shows."""
    summary, _, description = (inspect.getdoc(handler) or "").partition("\n\n")
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=summary, description=description or None, formatter_class=_Formatter, **options
    )
    parser.set_defaults(handler=handler)
    return parser


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def add_timeout(parser: argparse.ArgumentParser, seconds: float) -> None:
    parser.add_argument(
        "--timeout", type=positive_seconds, default=seconds, help=f"seconds to wait for a cluster (default {seconds:g})"
    )


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds greater than 0 (a wait of none, or of less, would never be answered)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds greater than 0")
    return value
