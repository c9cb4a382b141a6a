#!/usr/bin/env python3
r"""The code style Captum checks on its own code: black + usort formatting and
flake8, so an upstream contribution needs no reformatting; mypy on the
package, with the flags of setup.cfg's ``[mypy]`` section; and the layers of
setup.cfg's ``[importlinter]`` contracts (the library imports no application
module and none of datasets, pyarrow, matplotlib); and one docstring style for
arguments, Captum's ``name (type): description``."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["captum_ext", "tests", "benchmarks", "docs", "upstream"]


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


def _documented_names(doc: str):
    r"""Argument names of the ``Args:`` entries of ``doc``."""
    entries = args_entries(inspect.cleandoc(doc))
    return [re.sub(r"^\*{0,2}(\w+).*", r"\1", entry) for _, entry in entries]


def _public_entry_points():
    r"""``(name, class or None, function)`` of each public function of
    captum_ext.attr and captum_ext.metrics, and each public method
    (``__init__`` included) of their public attribution classes."""
    import captum_ext.attr as attr
    import captum_ext.metrics as metrics

    for module in (attr, metrics):
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isfunction(value):
                yield f"{module.__name__}.{name}", None, value
            elif inspect.isclass(value) and hasattr(value, "attribute"):
                for method_name, method in vars(value).items():
                    if inspect.isfunction(method) and (
                        method_name == "__init__" or not method_name.startswith("_")
                    ):
                        qualified = f"{module.__name__}.{name}.{method_name}"
                        yield qualified, value, method


def test_args_sections_list_their_own_arguments():
    # Captum repeats the arguments in each docstring: an Args section names
    # exactly the parameters of its own signature, in any order.
    wrong = []
    for name, owner, function in _public_entry_points():
        function = inspect.unwrap(function)
        params = [
            p for p in inspect.signature(function).parameters if p not in ("self",)
        ]
        # An __init__ without a docstring has its Args in the class's.
        doc = function.__doc__ or inspect.getdoc(owner) or ""
        documented = _documented_names(doc)
        if sorted(params) != sorted(documented):
            missing = sorted(set(params) - set(documented))
            extra = sorted(set(documented) - set(params))
            wrong.append(f"{name}: undocumented {missing}, not parameters {extra}")
    assert not wrong, "\n".join(wrong)
