#!/usr/bin/env python3
r"""Every code block of README.md and of the user guide (docs/guide/*.rst) runs
as written: bash blocks through the command line, Python blocks as scripts, in
order, in one temporary directory per document (later blocks use what earlier
ones wrote). ``captum-ext`` is this checkout's command line, as after ``pip
install -e .``; Hub ids the blocks name are served offline from a temporary
``HF_HOME`` holding stand-ins (tiny random models and datasets in the caches'
own layouts). A block opts out only with a marker comment giving a reason,
``<!-- docs-test: skip -- reason -->`` (Markdown) or ``.. docs-test: skip --
reason`` (reStructuredText) right before it; the opt-outs are counted."""

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Set

import pandas as pd
import pytest

from tests.helpers import (
    hub_dataset_cache,
    hub_model_cache,
    save_tiny_chat_lm,
    TINY_TEXTS,
)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide"
SKIP = re.compile(r"docs-test: skip -- (?P<reason>\S.*?)\s*(-->)?$")
LANGUAGES = ("bash", "python")
# The two commands (install + main job, install + this suite) and the viz
# extra's install: each installs packages.
EXPECTED_SKIPS = 3
HUB_MODEL = "distilbert/distilbert-base-uncased-finetuned-sst-2-english"
HUB_DATA = "stanfordnlp/sst2"
HUB_CHAT_LM = "Qwen/Qwen2.5-0.5B-Instruct"
BLOCK_TIMEOUT = 900


class Block(NamedTuple):
    where: str  # file:line
    language: str
    code: str
    skip: Optional[str]  # the opt-out's reason


def _skip_reason(previous: List[str]) -> Optional[str]:
    lines = [line.strip() for line in previous if line.strip()]
    match = SKIP.search(lines[-1]) if lines else None
    return match.group("reason") if match else None


def markdown_blocks(path: Path) -> List[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```") and lines[i] != "```":
            end = lines.index("```", i + 1)
            code = "\n".join(lines[i + 1 : end]) + "\n"
            where = f"{path.name}:{i + 1}"
            blocks.append(
                Block(where, lines[i][3:].strip(), code, _skip_reason(lines[:i]))
            )
            i = end
        i += 1
    return blocks


def rst_blocks(path: Path) -> List[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for i, line in enumerate(lines):
        match = re.match(r"\.\. code-block:: (\w+)", line)
        if not match:
            continue
        body = []
        for text in lines[i + 1 :]:
            if text.strip() and not text.startswith("   "):
                break
            body.append(text[3:])
        code = "\n".join(body).strip("\n") + "\n"
        where = f"{path.name}:{i + 1}"
        blocks.append(Block(where, match.group(1), code, _skip_reason(lines[:i])))
    return blocks


def guide_pages() -> List[Path]:
    r"""The guide's pages in the index's order (later pages use earlier
    pages' files, as a reader going through them would)."""
    index = (ROOT / "docs" / "index.rst").read_text(encoding="utf-8")
    names = re.findall(r"^\s+guide/(\w+)$", index, flags=re.M)
    return [GUIDE / f"{name}.rst" for name in names]


DOCUMENTS: Dict[str, List[Block]] = {
    "README": markdown_blocks(README),
    "guide": [block for page in guide_pages() for block in rst_blocks(page)],
}


def test_the_guide_index_lists_every_page():
    assert sorted(guide_pages()) == sorted(GUIDE.glob("*.rst"))


def test_every_block_is_bash_or_python_and_opt_outs_are_counted():
    blocks = [block for blocks in DOCUMENTS.values() for block in blocks]
    assert [b.where for b in blocks if b.language not in LANGUAGES] == []
    skipped = [b for b in blocks if b.skip]
    assert len(skipped) == EXPECTED_SKIPS, [(b.where, b.skip) for b in skipped]
    assert len(blocks) - len(skipped) >= 12  # what the documents run


def test_the_readme_shows_the_two_commands_exactly():
    codes = [block.code.strip() for block in DOCUMENTS["README"]]
    assert codes[:2] == [
        "pip install torch==2.13.0 -e . && captum-ext benchmark",
        'pip install torch==2.13.0 -e ".[test]" && python -m pytest',
    ]


@pytest.mark.parametrize(
    "name, text, read",
    [
        (
            "page.md",
            "<!-- docs-test: skip -- needs a GPU -->\n```bash\nnvidia-smi\n"
            "nvidia-smi -L\n```\n\ntext\n```python\nprint(1)\n```\n",
            markdown_blocks,
        ),
        (
            "page.rst",
            ".. docs-test: skip -- needs a GPU\n\n.. code-block:: bash\n\n"
            "   nvidia-smi\n   nvidia-smi -L\n\nText.\n\n"
            ".. code-block:: python\n\n   print(1)\n",
            rst_blocks,
        ),
    ],
)
def test_markers_are_read_from_the_line_before_a_block(tmp_path, name, text, read):
    page = tmp_path / name
    page.write_text(text)
    assert [(b.language, b.code, b.skip) for b in read(page)] == [
        ("bash", "nvidia-smi\nnvidia-smi -L\n", "needs a GPU"),
        ("python", "print(1)\n", None),
    ]


def _hub_stand_ins(home: Path, scratch: Path) -> None:
    hub_model_cache(home, HUB_MODEL, "1" * 40)
    hub_model_cache(home, HUB_CHAT_LM, "2" * 40, save_tiny_chat_lm)
    labels = [i % 2 for i in range(len(TINY_TEXTS))]
    frame = pd.DataFrame(
        {"idx": range(len(TINY_TEXTS)), "sentence": TINY_TEXTS, "label": labels}
    )
    splits = {"train": frame, "validation": frame, "test": frame}
    hub_dataset_cache(home, HUB_DATA, splits, scratch)


def _environment(tmp_path: Path) -> Dict[str, str]:
    r"""``captum-ext`` (and torchrun's ``--no-python captum-ext``) run this
    checkout; the Hub is offline with the stand-ins cached."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "captum-ext"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m captum_ext.cli "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    home = tmp_path / "hf_home"
    _hub_stand_ins(home, tmp_path / "scratch")
    env = dict(os.environ, HF_HOME=str(home), HF_HUB_OFFLINE="1")
    env["HF_DATASETS_OFFLINE"] = "1"
    env["PATH"] = os.pathsep.join(
        [str(bin_dir), str(Path(sys.executable).parent), env["PATH"]]
    )
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _run(block: Block, number: int, cwd: Path, env: Dict[str, str]) -> None:
    script = cwd / f"_block_{number}.{'sh' if block.language == 'bash' else 'py'}"
    script.write_text(block.code, encoding="utf-8")
    runner = ["bash", "-e"] if block.language == "bash" else [sys.executable]
    done = subprocess.run(
        runner + [script.name],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
    )
    script.unlink()
    assert done.returncode == 0, f"{block.where} failed:\n{block.code}\n{done.stderr}"


@pytest.mark.integration
@pytest.mark.parametrize("document", list(DOCUMENTS))
def test_every_block_runs_as_written(document, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = _environment(tmp_path)
    for number, block in enumerate(DOCUMENTS[document]):
        if not block.skip:
            _run(block, number, work, env)


# Inline code that reads as a command: `python -m x ...` or `captum-ext ...`
# (``...`` in reStructuredText), possibly wrapped over lines.
INLINE_COMMAND = re.compile(r"`{1,2}((?:python -m|captum-ext)\s[^`]+)`{1,2}")


def inline_commands(path: Path) -> List[str]:
    text = path.read_text(encoding="utf-8")
    return [" ".join(m.group(1).split()) for m in INLINE_COMMAND.finditer(text)]


def _documents_with_prose() -> List[Path]:
    return [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.rst"))]


def _subcommands() -> Dict[str, Set[str]]:
    r"""Each ``captum-ext`` subcommand and its option strings."""
    import argparse

    from captum_ext.cli.parser import build_parser as _parser

    (choices,) = [
        action.choices
        for action in _parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    return {
        name: {o for action in sub._actions for o in action.option_strings}
        for name, sub in choices.items()
    }


def test_inline_commands_in_the_prose_run_as_written():
    r"""What the prose names as a command runs as written: a ``python -m``
    module exists from the repository root (a benchmark is named as a module:
    its path would fail to import ``benchmarks``), and a ``captum-ext``
    command's subcommand and options exist."""
    import importlib.util

    subcommands = _subcommands()
    commands = {p.name: inline_commands(p) for p in _documents_with_prose()}
    assert sum(map(len, commands.values())) >= 15
    for document, found in commands.items():
        for command in found:
            words = shlex.split(command.replace("...", "").replace("…", ""))
            where = f"{document}: {command}"
            if words[0] == "python":
                assert importlib.util.find_spec(words[2]), where
                continue
            if len(words) > 1 and words[1] != "--help":
                assert words[1] in subcommands, where
                options = {w.split("=")[0] for w in words if w.startswith("--")}
                assert options <= subcommands[words[1]], where
    paths = [
        (page.name, m.group(0))
        for page in _documents_with_prose()
        for m in re.finditer(r"`benchmarks/\w+\.py`", page.read_text())
    ]
    assert not paths, f"a benchmark named by path (run it with python -m): {paths}"
