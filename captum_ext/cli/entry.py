#!/usr/bin/env python3
r"""``main``: parses the command line into the command's record, runs the
command, and turns every error into one line on stderr and an exit code
(``--debug`` adds the traceback)."""

import sys
import traceback
import warnings
from typing import Any, Callable, Dict, Optional, Sequence

from captum_ext.cli import commands
from captum_ext.cli.checks import check_utf8
from captum_ext.cli.parser import parse_command
from captum_ext.evaluation._utils.threads import configure_threads

__all__ = ["main"]

COMMANDS: Dict[str, Callable[[Any], int]] = {
    "explain": commands.explain,
    "explain-generation": commands.explain_generation,
    "benchmark": commands.benchmark,
    "attribute": commands.attribute,
}


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _show_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    print(f"captum-ext: notice: {_one_line(str(message))}", file=sys.stderr)


def _report(command: str, error: Exception, debug: bool) -> int:
    r"""One line on stderr; exit 2 for the errors a user can fix (bad values,
    files, names), 1 for anything else (with its type and a hint)."""
    if debug:
        traceback.print_exc()
    known = isinstance(error, (ValueError, OSError, LookupError))
    detail = _one_line(str(error)) or type(error).__name__
    if not known:
        detail = f"{type(error).__name__}: {detail} (rerun with --debug)"
    print(f"captum-ext {command}: error: {detail}", file=sys.stderr)
    return 2 if known else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    r"""Entry point of the ``captum-ext`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        check_utf8(argv)
    except ValueError as error:
        print(f"captum-ext: error: {error}", file=sys.stderr)
        return 2
    command, options, debug = parse_command(argv)
    # Passive OpenMP waiting only works when set before torch is imported.
    configure_threads()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return COMMANDS[command](options)
    except KeyboardInterrupt:
        print(f"captum-ext {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: B902 - the CLI's one-line contract
        return _report(command, error, debug)
