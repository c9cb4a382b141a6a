#!/usr/bin/env python3
r"""Sphinx configuration of the captum_ext API reference.

Build (warnings are errors, as ``tests/test_docs.py`` builds it)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Pages are autodoc'd from the docstrings; equations (``.. math::``) render with
MathJax, loaded by the browser from its CDN when a page is viewed (building needs
no network)."""

import importlib
import os
import pkgutil
import re
import sys
from pathlib import Path
from typing import List

from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.application import Sphinx

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

project = "captum_ext"
author = "captum_ext contributors"
copyright = "captum_ext contributors"
# Read, not imported: a page that imports nothing builds without torch.
_INIT = Path(__file__).resolve().parents[1] / "captum_ext" / "__init__.py"
_VERSION = re.search(r'__version__ = "([^"]+)"', _INIT.read_text())
assert _VERSION is not None, f"no __version__ in {_INIT}"
release = _VERSION.group(1)

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]

# Captum's docstring layout: "Args:" / "Returns:" sections (Google style).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" as a field list: NamedTuple fields are documented by autodoc too.
napoleon_use_ivar = True
# Methods a class inherits from another captum_ext class (AttCAT.attribute from
# CAT) are listed on it; those of torch, Captum and Python bases are not.
_DEFAULT_EXCLUDED = "attribute_future, compute_convergence_delta"
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    "inherited-members": (
        "Module, Attribution, GradientAttribution, LayerAttribution, tuple, "
        "object, ValueError, Exception, BaseException"
    ),
    # Captum's Attribution annotates these in its class body.
    "exclude-members": _DEFAULT_EXCLUDED,
}
autodoc_member_order = "bysource"
# Signatures keep the annotations; the docstrings already name the types.
autodoc_typehints = "signature"
exclude_patterns = ["_build"]
# A class documented where it is exported (captum_ext.evaluation.BenchmarkResult)
# also gets its defining module's name as a canonical alias, so a bare
# ``BenchmarkResult`` in a signature finds two targets for one object. Only that
# ambiguity warning is silenced; every other warning fails the build.
suppress_warnings = ["ref.python"]
html_theme = "alabaster"
html_static_path: List[str] = []


class PublicSubmodules(Directive):
    r"""``.. public-submodules:: package``: an ``automodule`` for every public
    submodule of ``package`` (names without a leading underscore), listing the
    public names it defines that ``package`` itself does not export, so a new
    module joins the reference without editing the pages and nothing is
    documented twice."""

    required_arguments = 1

    def run(self) -> list:
        package = importlib.import_module(self.arguments[0])
        exported = set(getattr(package, "__all__", []))
        lines: List[str] = []
        for info in sorted(pkgutil.iter_modules(package.__path__), key=str):
            if info.name.startswith("_"):
                continue
            name = f"{package.__name__}.{info.name}"
            members = _public_names(importlib.import_module(name)) - exported
            if not members:  # all of it is documented where it is exported
                continue
            lines += [f".. automodule:: {name}"]
            if members:
                lines += [f"   :members: {', '.join(sorted(members))}"]
            # What the package documents is not documented again here.
            excluded = exported | set(_DEFAULT_EXCLUDED.split(", "))
            lines += [f"   :exclude-members: {', '.join(sorted(excluded))}", ""]
        self.state_machine.insert_input(StringList(lines, source=package.__name__), "")
        return []


def _public_names(module: object) -> set:
    names = getattr(module, "__all__", None)
    if names is not None:
        return set(names)
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", None) == getattr(module, "__name__", None)
    }


def setup(app: Sphinx) -> None:
    app.add_directive("public-submodules", PublicSubmodules)
