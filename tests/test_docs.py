#!/usr/bin/env python3
r"""The Sphinx API reference (``docs/``) builds with warnings as errors, lists
every public class and function of the documented modules and renders the
equations."""

import importlib
import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import List, Set

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
# Modules whose ``__all__`` classes and functions the reference documents
# (evaluation's and defaults' submodules are discovered by docs/conf.py's
# ``public-submodules``).
DOCUMENTED = (
    "captum_ext",
    "captum_ext.attr",
    "captum_ext.metrics",
    "captum_ext.evaluation",
    "captum_ext.visualization",
    "captum_ext.evaluation.explain",
    "captum_ext.evaluation.report",
    "captum_ext.defaults.data",
    "captum_ext.defaults.decoders",
    "captum_ext.defaults.models",
)


def _sphinx(source: Path, out: Path) -> subprocess.CompletedProcess:
    r"""Builds ``source`` with the configuration of ``docs/conf.py``."""
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html"]
    return subprocess.run(
        command + ["-q", "-c", str(DOCS), str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _inventory(out: Path) -> Set[str]:
    r"""Names in ``objects.inv``: four header lines, then zlib-compressed lines
    ``name domain:role priority uri display-name``."""
    compressed = (out / "objects.inv").read_bytes().split(b"\n", 4)[4]
    return {
        line.split()[0] for line in zlib.decompress(compressed).decode().splitlines()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html")
    done = _sphinx(DOCS, out)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "WARNING" not in done.stderr
    return out


def _expected_names() -> List[str]:
    r"""Every class and function in the documented modules' ``__all__``
    (constants without a docstring are not listed by autodoc)."""
    names = []
    for module_name in DOCUMENTED:
        module = importlib.import_module(module_name)
        names += [
            f"{module_name}.{name}"
            for name in getattr(module, "__all__", [])
            if callable(getattr(module, name))
        ]
    return names


def test_every_public_name_is_documented(built: Path) -> None:
    inventory = _inventory(built)
    assert [name for name in _expected_names() if name not in inventory] == []
    # Methods, inherited ones included (AttCAT's and NormXLogit's come from
    # their base classes).
    for method in ("AttCAT", "CAT", "LogAt", "NormXLogit", "GlobEnc"):
        assert f"captum_ext.attr.{method}.attribute" in inventory
    assert "captum_ext.attr.DecodedLayerGradCam.attribute" in inventory
    assert "captum_ext.evaluation.distributed.distributed_context" in inventory
    # Captum's and torch's own members are not repeated.
    assert "captum_ext.attr.EmbeddingDecoder.zero_grad" not in inventory


def test_each_object_is_documented_once(built: Path) -> None:
    r"""A name exported by ``captum_ext.evaluation`` is documented there, not
    again in its defining submodule (the index listed ManifestMismatchError
    and attribute_dataset() twice)."""
    page = (built / "api" / "evaluation.html").read_text()
    ids = re.findall(r'<dt class="sig sig-object py" id="([^"]+)"', page)
    for name in ("ManifestMismatchError", "attribute_dataset", "load_data"):
        assert [i for i in ids if i.rsplit(".", 1)[-1] == name] == [
            f"captum_ext.evaluation.{name}"
        ]


def test_equations_render_with_mathjax(built: Path) -> None:
    page = (built / "api" / "metrics.html").read_text()
    assert page.count('class="math') >= 5
    assert "mathjax" in page.lower()
    # A docstring equation reached the page as TeX for MathJax, not as text.
    assert r"\tau" in page


def test_a_broken_docstring_fails_the_build(tmp_path: Path) -> None:
    r"""The build is honest: one warning (here, a module that does not exist)
    makes it fail."""
    source = tmp_path / "docs"
    source.mkdir()
    (source / "index.rst").write_text(
        "Broken\n======\n\n.. automodule:: no_such_module\n"
    )
    done = _sphinx(source, tmp_path / "html")
    assert done.returncode != 0
    assert "WARNING" in done.stderr and "no_such_module" in done.stderr
