#!/usr/bin/env python3
r"""The upstream pull request (``upstream/export.py``): exported into a copy of
the installed ``captum`` package, its Captum-style tests pass with
transformers and captum_ext unimportable, and its files pass Captum's
formatter (black + usort as ``ufmt``) and flake8 settings; the export refuses
a file that imports captum_ext's adapters or transformers."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import List

import captum
import captum_ext.attr
import pytest

ROOT = Path(__file__).resolve().parents[1]

# Captum's own configuration values (its pyproject.toml and setup.cfg).
CAPTUM_PYPROJECT = """[tool.usort]
first_party_detection = false

[tool.black]
target-version = ['py39']
"""
CAPTUM_FLAKE8 = ["--max-line-length", "88", "--ignore", "E203,W503,E704"]

# Loaded before the exported tests: neither transformers nor captum_ext can be
# imported there.
BLOCKER = """import sys

sys.modules["transformers"] = None
sys.modules["captum_ext"] = None
"""


def _export_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("export", ROOT / "upstream/export.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(args: List[str], cwd: Path) -> subprocess.CompletedProcess:
    # PYTHONPATH is the Captum copy alone: not this checkout.
    env = {**os.environ, "PYTHONPATH": str(cwd), "OMP_NUM_THREADS": "1"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r"""A copy of the installed captum package with the pull request applied;
    the export's printed list of files is in ``files.txt``."""
    root = tmp_path_factory.mktemp("captum_root")
    source = Path(captum.__file__).parent
    shutil.copytree(source, root / "captum", ignore=shutil.ignore_patterns("*.pyc"))
    result = _run([sys.executable, str(ROOT / "upstream/export.py"), str(root)], ROOT)
    assert result.returncode == 0, result.stderr
    files = re.findall(r"^  (\S+)  <- ", result.stdout, re.M)
    (root / "files.txt").write_text("\n".join(files))
    (root / "pyproject.toml").write_text(CAPTUM_PYPROJECT)
    (root / "conftest.py").write_text(BLOCKER)
    return root


def _files(root: Path) -> List[str]:
    return (root / "files.txt").read_text().split()


@pytest.mark.slow
def test_export_writes_only_under_root(exported: Path) -> None:
    files = _files(exported)
    assert "captum/metrics/_core/aopc.py" in files
    assert "tests/metrics/test_aopc.py" in files
    assert "captum/attr/_core/layer/attcat.py" in files
    assert "tests/attr/layer/test_cat.py" in files
    assert "captum/testing/helpers/plain_transformers.py" in files
    assert all(f.startswith(("captum/", "tests/")) for f in files)
    for name in files:
        text = (exported / name).read_text()
        assert "captum_ext" not in text, name
        if name.endswith(".py") and text.strip() != "#!/usr/bin/env python3":
            assert text.startswith("#!/usr/bin/env python3\n\n# pyre-strict\n"), name


@pytest.mark.slow
def test_exported_tests_pass_without_transformers(exported: Path) -> None:
    result = _run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0"]
        + ["-W", "ignore::DeprecationWarning", "tests/metrics", "tests/attr/layer"],
        exported,
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"\b([4-9]\d) passed", summary), summary  # >= 40 tests
    assert "failed" not in summary and "error" not in summary, summary


@pytest.mark.slow
def test_exported_files_pass_captum_lint(exported: Path) -> None:
    files = _files(exported)
    ufmt = _run([sys.executable, "-m", "ufmt", "check", *files], exported)
    assert ufmt.returncode == 0, ufmt.stdout + ufmt.stderr
    flake8 = _run(
        [sys.executable, "-m", "flake8", "--isolated", *CAPTUM_FLAKE8, *files],
        exported,
    )
    assert flake8.returncode == 0, flake8.stdout + flake8.stderr


@pytest.mark.slow
def test_exported_methods_are_in_captum_attr(exported: Path) -> None:
    export = _export_module()
    code = (
        "import captum.attr as attr\n"
        f"for name in {list(export.METHOD_NAMES)!r}:\n"
        "    cls = getattr(attr, name)\n"
        "    assert name in attr.__all__, name\n"
        "    assert cls.__module__.startswith('captum.attr._core.layer.'), cls\n"
        "    assert hasattr(cls.attribute, '__wrapped__'), name  # log_usage\n"
    )
    result = _run([sys.executable, "-c", BLOCKER + code], exported)
    assert result.returncode == 0, result.stderr


def test_public_methods_are_built_on_the_exported_classes() -> None:
    r"""captum_ext's public method is the exported class plus the shortcut:
    one source for both, no second copy of the algorithm."""
    export = _export_module()
    assert export.check_methods() == 0
    for module, name in zip(export.METHODS, export.METHOD_NAMES):
        core = importlib.import_module(f"captum_ext.attr._core.layer.{module}")
        public = getattr(captum_ext.attr, name)
        assert issubclass(public, getattr(core, name)), name
        assert public is not getattr(core, name), name


def test_export_refuses_adapters_and_transformers() -> None:
    export = _export_module()
    # model_forward holds the Hugging Face forward functions: it imports the
    # adapters, which have no place in Captum.
    with pytest.raises(export.ExportError) as refused:
        export.closure(["captum_ext._utils.model_forward"])
    # Every offending import is named, not only the first one met.
    for where in ("model_forward.py:", "token_batch.py:"):
        assert f"{where}" in str(refused.value)
    assert "imports captum_ext.adapters" in str(refused.value)
    with pytest.raises(export.ExportError, match="imports transformers"):
        export.check_imports(
            "def f():\n    from transformers import AutoModel\n", "x.py"
        )
    export.check_imports("import torch\nfrom captum.log import log_usage\n", "x.py")


def test_export_refuses_a_leftover_captum_ext_name() -> None:
    export = _export_module()
    with pytest.raises(export.ExportError, match=r"line\(s\) \[2\]"):
        export.rewrite('"""Doc."""\nx = "see captum_ext.classifier_forward"\n', "x.py")
    rewritten = export.rewrite(
        "from captum_ext._utils.log import log_usage\n"
        "from captum_ext.metrics._utils.inputs import TokenOptions\n",
        "x.py",
    )
    assert "from captum.log import log_usage" in rewritten
    assert "from captum.metrics._utils.inputs import TokenOptions" in rewritten
    assert rewritten.startswith("#!/usr/bin/env python3\n\n# pyre-strict\n")


def test_export_refuses_a_folder_without_captum(tmp_path: Path) -> None:
    result = _run(
        [sys.executable, str(ROOT / "upstream/export.py"), str(tmp_path)], ROOT
    )
    assert result.returncode == 1
    assert "nothing written" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_export_twice_changes_nothing(exported: Path) -> None:
    files = _files(exported)
    before = {name: (exported / name).read_text() for name in files}
    result = _run(
        [sys.executable, str(ROOT / "upstream/export.py"), str(exported)], ROOT
    )
    assert result.returncode == 0, result.stderr
    assert {name: (exported / name).read_text() for name in files} == before


@pytest.mark.slow
def test_export_refuses_to_replace_other_files(tmp_path: Path) -> None:
    metrics = tmp_path / "captum" / "metrics"
    (metrics / "_core").mkdir(parents=True)
    shutil.copy(Path(captum.__file__).parent / "metrics/__init__.py", metrics)
    (tmp_path / "captum" / "attr").mkdir()
    shutil.copy(
        Path(captum.__file__).parent / "attr/__init__.py", tmp_path / "captum/attr"
    )
    (metrics / "_core" / "aopc.py").write_text("x = 1\n")
    command = [sys.executable, str(ROOT / "upstream/export.py"), str(tmp_path)]
    refused = _run(command, ROOT)
    assert refused.returncode == 1
    assert "would replace" in refused.stderr
    assert "captum/metrics/_core/aopc.py" in refused.stderr
    assert (metrics / "_core" / "aopc.py").read_text() == "x = 1\n"
    assert sorted(p.name for p in metrics.iterdir()) == ["__init__.py", "_core"]
    forced = _run(command[:2] + ["--force", str(tmp_path)], ROOT)
    assert forced.returncode == 0, forced.stderr
    assert "def aopc(" in (metrics / "_core" / "aopc.py").read_text()
