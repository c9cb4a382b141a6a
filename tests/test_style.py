#!/usr/bin/env python3
r"""The code style Captum checks on its own code: black + usort formatting and
flake8, so an upstream contribution needs no reformatting; mypy on the
package, with the flags of setup.cfg's ``[mypy]`` section; and the layers of
setup.cfg's ``[importlinter]`` contracts (the library imports no application
module and none of datasets, pyarrow, matplotlib); and one docstring style for
arguments, Captum's ``name (type): description``."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["captum_ext", "tests", "benchmarks", "docs"]


@pytest.mark.parametrize(
    "command",
    [
        ["black", "--check", "--quiet"],
        ["usort", "check"],
        ["flake8"],
    ],
    ids=["black", "usort", "flake8"],
)
def test_style(command):
    result = subprocess.run(
        [sys.executable, "-m", *command, *TARGETS],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy():
    # No arguments: files and flags come from setup.cfg [mypy]; the cache
    # (.mypy_cache, git-ignored) makes reruns take seconds.
    result = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts():
    result = subprocess.run(
        ["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


# "Args:" on its own line, then entries one indent deeper until the indent drops.
_ARGS_HEADER = re.compile(r"^(\s*)Args:\s*$")
_CAPTUM_ENTRY = re.compile(r"^\*{0,2}\w+ \([^)]+\): ")


def args_entries(text: str):
    r"""``(line number, entry)`` of every argument entry of every ``Args:``
    section: the lines one indent (4 spaces) below the header."""
    indent = None
    for number, line in enumerate(text.splitlines(), 1):
        header = _ARGS_HEADER.match(line)
        if header:
            indent = header.group(1) + " " * 4
        elif indent is not None and line.strip():
            if not line.startswith(indent):
                indent = None
            elif not line[len(indent)].isspace():
                yield number, line.strip()


def test_args_entries_name_their_type():
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: {entry[:60]}"
        for path in sorted((ROOT / "captum_ext").rglob("*.py"))
        for number, entry in args_entries(path.read_text())
        if not _CAPTUM_ENTRY.match(entry)
    ]
    assert not wrong, "\n".join(wrong)


def test_args_entries_sees_an_untyped_entry():
    section = "    Args:\n        model (Module): a model.\n        tokenizer: its.\n"
    entries = list(args_entries(section))
    assert entries == [(2, "model (Module): a model."), (3, "tokenizer: its.")]
    assert [bool(_CAPTUM_ENTRY.match(e)) for _, e in entries] == [True, False]
