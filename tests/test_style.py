#!/usr/bin/env python3
r"""The code style Captum checks on its own code: black + usort formatting and
flake8, so an upstream contribution needs no reformatting; mypy on the
package, with the flags of setup.cfg's ``[mypy]`` section; and the layers of
setup.cfg's ``[importlinter]`` contracts (the library imports no application
module and none of datasets, pyarrow, matplotlib)."""

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
