#!/usr/bin/env python3
r"""Writes captum_ext's upstream pull request into a Captum source tree.

Usage::

    python upstream/export.py [--force] CAPTUM_ROOT
    python upstream/export.py --check-methods

``CAPTUM_ROOT`` is a Captum checkout (or any folder holding a ``captum``
package, e.g. a copy of the installed one). The export reads captum_ext's own
files (no second copy of the algorithms): the modules of :data:`METRICS` and
every captum_ext module they import, rewritten into Captum's namespace
(:data:`PACKAGES`), with Captum's ``# pyre-strict`` header, ``captum.log``'s
``log_usage`` and Captum's formatting (black + usort as ``ufmt``). The tests
and test models come from the templates under ``upstream/templates``. It adds
the public names to ``captum/metrics/__init__.py``, the modules of
:data:`METHODS` (the methods built Captum's way, captum_ext.attr._core.layer)
with their names to ``captum/attr/__init__.py``, prints the files written
and a suggested commit message, and writes nothing outside ``CAPTUM_ROOT``.

It refuses, before writing anything, when an exported file imports anything
but the standard library, torch, numpy, tqdm and captum (captum_ext's adapters
and transformers included), or still names captum_ext after the rewrite, and
(unless ``--force``) when it would replace a file of the tree with other text.
A second export into the same tree changes nothing.
"""

import ast
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import black
from ufmt.core import ufmt_bytes
from usort.config import Config as UsortConfig

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "templates"

# The metrics of the pull request (modules of captum_ext.metrics._core).
METRICS = (
    "aopc",
    "log_odds",
    "sufficiency",
    "hiding_revealing",
    "kendall_tau",
    "token_overlap",
    "average_precision",
    "dot_product",
)

# The methods of the pull request: modules of captum_ext.attr._core.layer, the
# classes built Captum's way (from forward_func and the modules they read; the
# public captum_ext classes add the Hugging Face shortcut on top of them), with
# the public names captum.attr gains, one per module. Each scores the positions
# of the states its modules give (a layer's token axis), so all are layer
# methods. ``python upstream/export.py --check-methods`` names what a module
# of captum_ext.attr._core.layer still imports that Captum has no place for.
METHODS = (
    "cat",
    "attcat",
    "logat",
    "normxlogit",
    "embedding_norm",
    "last_layer_attention",
    "attention_rollout",
    "globenc",
    "decoded_layer_attribution",
    "decoded_layer_grad_cam",
)
# Public names captum.attr gains beside the methods: the record of the modules
# GlobEnc reads (captum_ext module, name).
ATTR_HELPERS = (("captum_ext._utils.block_parts", "BlockParts"),)


def method_name(module: str) -> str:
    r"""The class a module of :data:`METHODS` defines: the first name of its
    ``__all__``."""
    path = module_file(f"captum_ext.attr._core.layer.{module}")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == (
            "__all__"
        ):
            return str(ast.literal_eval(node.value)[0])
    raise ExportError(f"{path.relative_to(ROOT)} has no __all__")


# captum_ext package -> Captum package. captum_ext._utils holds helpers shared by
# methods and metrics; Captum's captum._utils already has a progress.py, so they
# get a package of their own.
PACKAGES = (
    ("captum_ext.metrics", "captum.metrics"),
    ("captum_ext._utils", "captum._utils.tokens"),
    # The methods built Captum's way: CAT(forward_func, layer), ...
    ("captum_ext.attr._core.layer", "captum.attr._core.layer"),
    ("captum_ext.attr._utils", "captum.attr._utils.tokens"),
)
# captum_ext's own test models that the exported tests use, at their Captum
# paths (plain PyTorch, so the same file serves both test suites).
TEST_HELPERS = (
    (
        "tests/attr/plain_transformers.py",
        "captum/testing/helpers/plain_transformers.py",
    ),
)
# The part of captum_ext.metrics's docstring that Captum's Sphinx page gets.
SPHINX_SECTION = (".. _metric-arguments:", ".. _generation-metric-arguments:")

# Typed for captum_ext's mypy only; Captum's own decorator is the same function.
REPLACED_MODULES = {"captum_ext._utils.log": "captum.log"}

# What captum_ext's text says about its Hugging Face helpers, said for Captum.
PHRASES = (
    (", e.g. :func:`captum_ext.classifier_forward`; a", "; a"),
    (
        '"Hugging Face model pass captum_ext.classifier_forward(model), which "\n'
        '        "returns its .logits"',
        '"model whose output is an object, pass a function returning its "\n'
        '        ".logits"',
    ),
    (
        "``,\n    e.g. :func:`captum_ext.classifier_forward`; a module",
        "``;\n    a module",
    ),
    (
        ">>> forward = captum_ext.classifier_forward(model)",
        ">>> forward = lambda ids, mask: model(ids, attention_mask=mask).logits",
    ),
    ("captum_ext runs it in eval", "Captum runs it in eval"),
    ("no captum_ext call on it", "no method or metric call on it"),
    ("captum_ext call", "method's or metric's call"),
    ("captum_ext lock", "method's or metric's lock"),
    (":class:`~captum_ext.ClassifierLogits`", "a model wrapper"),
    (
        'f"logits), got {got}; wrap a Hugging Face model with "\n'
        '            "captum_ext.classifier_forward(model), or pass the model itself '
        '(the "\n'
        '            "shortcut) to explain a causal LM\'s generated text"',
        'f"logits), got {got}; for a model whose output is an object, pass a "\n'
        '            "function returning its .logits"',
    ),
)

ALLOWED_ROOTS = frozenset({"torch", "numpy", "tqdm", "captum"})
SHEBANG = "#!/usr/bin/env python3\n"
HEADER = f"{SHEBANG}\n# pyre-strict\n"


class ExportError(Exception):
    r"""The export refuses: nothing was written."""


@dataclass(frozen=True)
class Output:
    r"""One file of the pull request: its path under CAPTUM_ROOT and text."""

    path: str
    text: str
    source: str


def module_file(module: str) -> Path:
    r"""The source file of a captum_ext module."""
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


# The public names of :data:`METHODS`, one per module.
METHOD_NAMES = tuple(method_name(module) for module in METHODS)


def imported_modules(text: str, where: str) -> List[Tuple[str, int]]:
    r"""``(module, line)`` of every import of ``text``, at any depth (an import
    inside a function counts: it runs as soon as the function does)."""
    found = []
    for node in ast.walk(ast.parse(text, where)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise ExportError(f"{where}:{node.lineno}: relative import")
            found.append((node.module or "", node.lineno))
    return found


def check_import(module: str, where: str) -> None:
    r"""Raises :class:`ExportError` unless ``module`` is of the standard
    library, torch, numpy, tqdm or captum."""
    root = module.split(".")[0]
    if root not in ALLOWED_ROOTS and root not in sys.stdlib_module_names:
        raise ExportError(
            f"{where} imports {module}; an exported file may import only the "
            "standard library, torch, numpy, tqdm and captum"
        )


def check_imports(text: str, where: str) -> None:
    r""":func:`check_import` on every import of ``text``."""
    for module, line in imported_modules(text, where):
        check_import(module, f"{where}:{line}")


def closure(entries: Sequence[str]) -> List[str]:
    r"""The captum_ext modules ``entries`` import, directly or not, themselves
    included; raises, naming every offending import, when one of them cannot
    be exported."""
    seen: Dict[str, None] = {}
    problems: List[str] = []
    todo = [(module, "the export's entries") for module in entries]
    while todo:
        module, importer = todo.pop()
        if captum_name(module) is None:
            problems.append(f"{importer} imports {module}")
            continue
        if module in seen or module in REPLACED_MODULES:
            continue
        seen[module] = None
        path = module_file(module)
        where = str(path.relative_to(ROOT))
        for name, line in imported_modules(path.read_text(), where):
            if name.split(".")[0] == "captum_ext":
                todo.append((name, f"{where}:{line}"))
            else:
                try:
                    check_import(name, f"{where}:{line}")
                except ExportError:
                    problems.append(f"{where}:{line} imports {name}")
    if problems:
        raise ExportError(
            "an exported file may import only the standard library, torch, "
            "numpy, tqdm, captum and the captum_ext modules that have a place "
            "in Captum (PACKAGES); " + "; ".join(sorted(set(problems)))
        )
    return sorted(seen)


def captum_name(module: str) -> Optional[str]:
    r"""The Captum module of a captum_ext module, None if it has none."""
    if module in REPLACED_MODULES:
        return REPLACED_MODULES[module]
    for ours, theirs in PACKAGES:
        if module == ours or module.startswith(ours + "."):
            return theirs + module[len(ours) :]
    return None


def rewrite(text: str, where: str) -> str:
    r"""captum_ext's Python file in Captum's namespace, with Captum's header."""
    return with_header(rewrite_text(text, where))


def rewrite_text(text: str, where: str) -> str:
    r"""captum_ext's text in Captum's namespace; raises where it would still
    name captum_ext."""
    for ours, theirs in REPLACED_MODULES.items():
        text = text.replace(f"from {ours} import", f"from {theirs} import")
    for ours, theirs in PHRASES:
        text = text.replace(ours, theirs)
    for ours, theirs in PACKAGES:
        text = re.sub(rf"\b{re.escape(ours)}\b", theirs, text)
    left = [n for n, line in enumerate(text.splitlines(), 1) if "captum_ext" in line]
    if left:
        raise ExportError(
            f"{where} still names captum_ext on line(s) {left} after the rewrite; "
            "add a phrase to PHRASES in upstream/export.py"
        )
    return text


def with_header(text: str) -> str:
    r"""``text`` with Captum's shebang and ``# pyre-strict`` header."""
    body = text.removeprefix(SHEBANG).lstrip("\n")
    return f"{HEADER}\n{body}" if body else HEADER


def formatted(path: str, text: str) -> str:
    r"""``text`` formatted as Captum's ``ufmt format`` would (black for
    Python 3.9, usort without first-party detection: captum and torch sort
    together)."""
    mode = black.Mode(target_versions={black.TargetVersion.PY39})
    usort = UsortConfig(first_party_detection=False)
    return ufmt_bytes(
        Path(path), text.encode(), black_config=mode, usort_config=usort
    ).decode()


def exported_modules() -> List[str]:
    r"""The captum_ext modules of the pull request."""
    entries = [f"captum_ext.metrics._core.{name}" for name in METRICS]
    entries += [f"captum_ext.attr._core.layer.{name}" for name in METHODS]
    return closure(entries)


def library_outputs(modules: Sequence[str]) -> List[Output]:
    r"""The exported captum_ext ``modules``, at their Captum paths."""
    outputs = []
    for module in modules:
        source = module_file(module)
        theirs = captum_name(module)
        assert theirs is not None  # closure() checked it
        path = "/".join(theirs.split("."))
        path += "/__init__.py" if source.name == "__init__.py" else ".py"
        text = rewrite(source.read_text(), str(source.relative_to(ROOT)))
        outputs.append(Output(path, text, str(source.relative_to(ROOT))))
    return outputs


def package_inits(outputs: Sequence[Output], captum_root: Path) -> List[Output]:
    r"""An ``__init__.py`` (Captum's empty one) for each folder the outputs
    create; existing folders stay as they are (``captum/testing`` is a
    namespace package)."""
    paths = {output.path for output in outputs}
    missing = []
    for output in outputs:
        for parent in Path(output.path).parents:
            init = str(parent / "__init__.py")
            if str(parent) == "." or init in paths or (captum_root / parent).exists():
                continue
            paths.add(init)
            missing.append(Output(init, SHEBANG, "(new package)"))
    return missing


def template_outputs() -> List[Output]:
    r"""The tests and test models, from upstream/templates (already in
    Captum's namespace)."""
    outputs = []
    for source in sorted(TEMPLATES.rglob("*.py")):
        path = str(source.relative_to(TEMPLATES))
        text = rewrite(source.read_text(), f"upstream/templates/{path}")
        outputs.append(Output(path, text, f"upstream/templates/{path}"))
    return outputs


def test_helper_outputs() -> List[Output]:
    r"""captum_ext's test models of :data:`TEST_HELPERS`, at their Captum
    paths."""
    return [
        Output(theirs, rewrite((ROOT / ours).read_text(), ours), ours)
        for ours, theirs in TEST_HELPERS
    ]


def sphinx_methods_output(captum_root: Path) -> List[Output]:
    r"""Captum's ``sphinx/source/layer.rst`` with an entry per method of
    :data:`METHOD_NAMES` (its ``attribute`` may be inherited from the shared
    base) and per name of :data:`ATTR_HELPERS`; none in a tree without it."""
    path = "sphinx/source/layer.rst"
    if not (captum_root / path).is_file():
        return []
    inherited = "    :inherited-members: Attribution\n"
    entries = [
        f"{name}\n{'^' * len(name)}\n\n.. autoclass:: captum.attr.{name}\n"
        "    :members:\n" + (inherited if name in METHOD_NAMES else "")
        for name in METHOD_NAMES + tuple(name for _, name in ATTR_HELPERS)
    ]
    text = (captum_root / path).read_text()
    # A second export replaces the entries of the first.
    first = entries[0].split("\n")[0] + "\n^"
    text = text.split(first)[0].rstrip("\n") + "\n\n" + "\n".join(entries)
    return [Output(path, text, "upstream/export.py METHOD_NAMES")]


def sphinx_output(captum_root: Path, public: Sequence[str]) -> List[Output]:
    r"""Captum's ``sphinx/source/metrics.rst`` with a section on the token
    metrics: captum_ext.metrics's documentation of their shared arguments and
    presets, then an entry per public name; none in a tree without it."""
    path = "sphinx/source/metrics.rst"
    if not (captum_root / path).is_file():
        return []
    init = module_file("captum_ext.metrics")
    doc = ast.get_docstring(ast.parse(init.read_text()), clean=True) or ""
    start, end = SPHINX_SECTION
    if start not in doc or end not in doc:
        raise ExportError(f"{init.relative_to(ROOT)}'s docstring lost {start}/{end}")
    shared = doc[doc.index(start) : doc.index(end)].strip()
    entries = []
    for name in public:
        kind = "autoclass" if name[0].isupper() else "autofunction"
        # The results are NamedTuples whose docstrings list their fields.
        listed = kind == "autoclass" and not name.endswith("Result")
        members = "\n    :members:" if listed else ""
        rule = "^" * len(name)
        entries.append(f"{name}\n{rule}\n\n.. {kind}:: {name}{members}\n")
    section = (
        "\n\nToken metrics\n^^^^^^^^^^^^^\n\n.. currentmodule:: captum.metrics\n\n"
        + shared
        + "\n\n\n"
        + "\n\n".join(entries)
    )
    text = (captum_root / path).read_text()
    # A second export replaces the section of the first.
    text = text.split(section[: section.index("^")])[0].rstrip("\n") + section
    return [Output(path, rewrite_text(text, path), "captum_ext/metrics/__init__.py")]


def public_imports(modules: Sequence[str]) -> Dict[str, str]:
    r"""``{name: "from captum.metrics... import name"}`` for each public name of
    captum_ext.metrics defined in one of the exported ``modules``."""
    init = module_file("captum_ext.metrics")
    public = {}
    for node in ast.walk(ast.parse(init.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.module not in modules:
            continue
        source = f"from {captum_name(node.module or '')} import "
        for alias in node.names:
            public[alias.name] = source + alias.name
    return public


def metrics_init(captum_root: Path, modules: Sequence[str]) -> Output:
    r"""Captum's ``captum/metrics/__init__.py`` with the public names of the
    exported metrics added."""
    return package_init(
        captum_root,
        "captum/metrics/__init__.py",
        public_imports(modules),
        "captum_ext/metrics/__init__.py (public names)",
    )


def attr_init(captum_root: Path) -> Output:
    r"""Captum's ``captum/attr/__init__.py`` with :data:`METHOD_NAMES` and
    :data:`ATTR_HELPERS` added."""
    public = {
        name: f"from captum.attr._core.layer.{module} import {name}"
        for module, name in zip(METHODS, METHOD_NAMES)
    }
    for module, name in ATTR_HELPERS:
        public[name] = f"from {captum_name(module)} import {name}"
    return package_init(
        captum_root, "captum/attr/__init__.py", public, "upstream/export.py METHODS"
    )


def package_init(
    captum_root: Path, path: str, public: Dict[str, str], source: str
) -> Output:
    r"""Captum's package ``__init__.py`` at ``path`` with the ``public`` names
    (``{name: import line}``) added to its imports and ``__all__``; names it
    already has are left alone."""
    text = (captum_root / path).read_text()
    tree = ast.parse(text)
    listed = next(
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", None) == "__all__" for t in node.targets)
    )
    assert isinstance(listed.value, ast.List)
    names = [ast.literal_eval(item) for item in listed.value.elts]
    added = [name for name in public if name not in names]
    imports = [public[name] for name in added]
    lines = text.splitlines()
    start, end = listed.lineno - 1, listed.end_lineno or listed.lineno
    entries = "".join(f'    "{name}",\n' for name in names + added)
    new = (
        "\n".join(lines[:start])
        + "\n"
        + "".join(line + "\n" for line in imports)
        + f"\n__all__ = [\n{entries}]\n"
        + "\n".join(lines[end:])
    )
    return Output(path, new, source)


def commit_message(outputs: Sequence[Output]) -> str:
    r"""The suggested commit message of the pull request."""
    tests = sum(1 for o in outputs if o.path.startswith("tests/"))
    body = (
        f"captum.attr gains {', '.join(METHOD_NAMES)}: token attributions of "
        "transformers built from forward_func and the modules they read "
        "(layer states, attention probabilities, the head, the embedding, the "
        "decomposed blocks, a decoder onto the vocabulary). "
        f"captum.metrics gains {', '.join(METRICS)}: perturbation curves "
        "(AOPC, log-odds, sufficiency, hiding/revealing), class sensitivity "
        "(Kendall tau, token overlap) and plausibility against known evidence "
        "(average precision, dot product) of attributions over token ids, with "
        "Captum's forward_func, inputs, attributions, target and "
        "additional_forward_args. Helpers shared by token methods and metrics "
        "are in captum._utils.tokens, the tests' plain-PyTorch transformers "
        f"and naive references in captum.testing.helpers; {tests} test files."
    )
    title = "Add transformer token attributions and token-level metrics"
    return title + "\n\n" + textwrap.fill(body, 72)


def build(captum_root: Path) -> List[Output]:
    r"""Every file of the pull request, checked and formatted; writes nothing."""
    for package in ("metrics", "attr"):
        if not (captum_root / "captum" / package / "__init__.py").is_file():
            raise ExportError(
                f"{captum_root} holds no captum package "
                f"(captum/{package}/__init__.py)"
            )
    modules = exported_modules()
    outputs = library_outputs(modules) + template_outputs() + test_helper_outputs()
    outputs += package_inits(outputs, captum_root)
    outputs.append(metrics_init(captum_root, modules))
    outputs.append(attr_init(captum_root))
    checked = []
    for output in outputs:
        check_imports(output.text, output.path)
        text = formatted(output.path, output.text)
        checked.append(Output(output.path, text, output.source))
    sphinx = sphinx_output(captum_root, list(public_imports(modules)))
    return checked + sphinx + sphinx_methods_output(captum_root)


def python39_notes(outputs: Sequence[Output]) -> List[str]:
    r"""What in ``outputs`` needs a Python newer than Captum's floor (3.9):
    syntax, and the dataclass options of 3.10."""
    notes = []
    for output in outputs:
        if not output.path.endswith(".py"):
            continue
        try:
            ast.parse(output.text, output.path, feature_version=(3, 9))
        except SyntaxError as error:
            notes.append(f"{output.path}:{error.lineno}: {error.msg}")
        for number, line in enumerate(output.text.splitlines(), 1):
            if re.search(r"@dataclass\(.*\b(kw_only|slots)=", line):
                notes.append(f"{output.path}:{number}: {line.strip()} (3.10)")
    return notes


def collisions(captum_root: Path, outputs: Sequence[Output]) -> List[str]:
    r"""Files of Captum's tree that the export would replace with other text:
    any but those it extends (``captum/attr/__init__.py``,
    ``captum/metrics/__init__.py``, the Sphinx pages). A file an earlier
    export wrote, unchanged since, is no collision."""
    extended = {
        "captum/attr/__init__.py",
        "captum/metrics/__init__.py",
        "sphinx/source/layer.rst",
        "sphinx/source/metrics.rst",
    }
    return [
        output.path
        for output in outputs
        if output.path not in extended
        and (captum_root / output.path).is_file()
        and (captum_root / output.path).read_text() != output.text
    ]


def write(captum_root: Path, outputs: Sequence[Output]) -> None:
    r"""Writes ``outputs`` under ``captum_root`` (and nowhere else)."""
    root = captum_root.resolve()
    for output in outputs:
        target = (root / output.path).resolve()
        if root not in target.parents:
            raise ExportError(f"{output.path} lies outside {root}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(output.text)


def check_methods() -> int:
    r"""Prints, for each method of captum_ext.attr._core.layer, whether its
    files could be exported and, if not, every import that stops them; 0 if
    all could."""
    blocked = 0
    for source in sorted((ROOT / "captum_ext/attr/_core/layer").glob("[!_]*.py")):
        module = f"captum_ext.attr._core.layer.{source.stem}"
        try:
            closure([module])
        except ExportError as error:
            blocked += 1
            reasons = str(error).split("; ")[1:]
            print(f"{source.stem}: blocked by")
            print("".join(f"    {reason}\n" for reason in reasons), end="")
        else:
            print(f"{source.stem}: exportable")
    return 1 if blocked else 0


def main(argv: Sequence[str]) -> int:
    if list(argv) == ["--check-methods"]:
        return check_methods()
    force = "--force" in argv
    paths = [arg for arg in argv if arg != "--force"]
    if len(paths) != 1 or paths[0].startswith("-"):
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    captum_root = Path(paths[0])
    try:
        outputs = build(captum_root)
        replaced = collisions(captum_root, outputs)
        if replaced and not force:
            raise ExportError(
                f"it would replace files of the tree: {replaced}; pass --force "
                "to overwrite them"
            )
    except ExportError as error:
        print(f"export refused, nothing written: {error}", file=sys.stderr)
        return 1
    write(captum_root, outputs)
    print(f"Wrote {len(outputs)} files under {captum_root}:")
    for output in outputs:
        print(f"  {output.path}  <- {output.source}")
    notes = python39_notes(outputs)
    if notes:
        print("\nNeeds Python > 3.9 (Captum supports 3.9), to change in captum_ext:")
        print("".join(f"  {note}\n" for note in notes), end="")
    print("\nSuggested commit message:\n")
    print(commit_message(outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
