#!/usr/bin/env python3
r"""The artifact cache rebuilds a corrupted or incomplete directory, never
exposes a half-built one and removes what killed builders left. A tiny build
function stands in for fine-tuning."""

import ast
import json
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, List

import captum_ext
import captum_ext.defaults.cache
import pytest
from captum_ext.defaults.cache import (
    cache_root,
    cached_directory,
    is_complete,
    remove_orphans,
)


class _Build:
    r"""Writes two files (one in a sub-directory) and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, directory: Path) -> None:
        self.calls += 1
        (directory / "weights.bin").write_bytes(b"\x00\x01" * 100)
        (directory / "sub").mkdir()
        (directory / "sub" / "config.json").write_text('{"a": 1}')


@pytest.fixture
def build(tmp_path, monkeypatch) -> _Build:
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path / "cache"))
    return _Build()


def _leftovers(root: Path) -> List[str]:
    return [p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(".")]


def test_cache_root_follows_environment(build, tmp_path):
    assert cache_root() == tmp_path / "cache"


def test_built_once_then_reused(build):
    first = cached_directory("artifact-v1", build)
    second = cached_directory("artifact-v1", build)
    assert first == second == cache_root() / "artifact-v1"
    assert build.calls == 1
    assert (first / "weights.bin").read_bytes() == b"\x00\x01" * 100
    manifest = json.loads((first / "MANIFEST.json").read_text())
    assert sorted(manifest) == ["sub/config.json", "weights.bin"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: (d / "weights.bin").write_bytes(b"\x00\x02" * 100),  # altered
        lambda d: (d / "sub" / "config.json").unlink(),  # missing
        lambda d: (d / "MANIFEST.json").unlink(),  # interrupted before manifest
        lambda d: (d / "MANIFEST.json").write_text("{not json"),
        lambda d: (d / "stray.txt").write_text("x"),  # unexpected file
    ],
    ids=["altered", "missing", "no-manifest", "bad-manifest", "extra-file"],
)
def test_damaged_directory_is_detected_and_rebuilt(build, damage):
    directory = cached_directory("artifact-v1", build)
    damage(directory)
    assert not is_complete(directory)
    rebuilt = cached_directory("artifact-v1", build)
    assert build.calls == 2
    assert is_complete(rebuilt)
    assert (rebuilt / "weights.bin").read_bytes() == b"\x00\x01" * 100
    assert not (rebuilt / "stray.txt").exists()


def test_failed_build_leaves_nothing(build):
    def failing(directory: Path) -> None:
        (directory / "partial.bin").write_bytes(b"half")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        cached_directory("artifact-v1", failing)
    assert not (cache_root() / "artifact-v1").exists()
    assert _leftovers(cache_root()) == []
    # The next call builds normally.
    assert is_complete(cached_directory("artifact-v1", build))


def _orphan(root: Path, name: str) -> Path:
    r"""What a builder killed mid-build leaves: a half-written temporary
    directory and its lock file, with no lock holder."""
    (root / f".{name}.lock").touch()
    path = root / f".{name}.build-k1ll3d00"
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "half.bin").write_bytes(b"half")
    return path


def test_orphans_of_any_artifact_are_removed_on_next_access(build):
    root = cache_root()
    orphans = [_orphan(root, "artifact-v1"), _orphan(root, "old.recipe-v0")]
    assert sorted(_leftovers(root)) == sorted(p.name for p in orphans)
    cached_directory("another-v1", build)
    assert _leftovers(root) == []
    assert (root / "another-v1").is_dir()


def test_removes_nothing_else(build):
    root = cache_root()
    cached_directory("artifact-v1", build)
    (root / ".hidden").mkdir()  # no ".<random>" suffix: not a temporary directory
    (root / ".notes.txt").write_text("a file, not a directory")
    assert remove_orphans(root) == []
    assert is_complete(root / "artifact-v1")
    assert (root / ".hidden").is_dir() and (root / ".notes.txt").is_file()


def test_hidden_directories_of_the_user_are_kept(build):
    r"""``$CAPTUM_EXT_CACHE`` may point at a home directory: only the cache's
    own temporary names, beside their lock files, are ever removed."""
    root = cache_root()
    kept = [".config.d", ".local.share", ".a.build-12345678", ".b.tmp-12345678"]
    for name in kept:
        (root / name / "sub").mkdir(parents=True)
    (root / ".c.build-1234567").mkdir()  # one random character short
    (root / ".c.lock").touch()
    cached_directory("artifact-v1", build)
    assert remove_orphans(root) == []
    assert sorted(_leftovers(root)) == sorted(kept + [".c.build-1234567"])


def test_live_builders_directories_are_kept(build):
    r"""A build in progress in another thread (another open lock file, as another
    process would have) and a build nesting another keep their directories."""
    started, finish = threading.Event(), threading.Event()

    def slow(directory: Path) -> None:
        (directory / "first.bin").write_bytes(b"1")
        started.set()
        assert finish.wait(timeout=60)
        # A nested build sweeps while this one's directory exists.
        cached_directory("nested-v1", build)
        (directory / "second.bin").write_bytes(b"2")

    with ThreadPoolExecutor(1) as pool:
        slow_build = pool.submit(cached_directory, "slow-v1", slow)
        assert started.wait(timeout=60)
        assert remove_orphans(cache_root()) == []
        cached_directory("artifact-v1", build)  # sweeps too
        finish.set()
        final = slow_build.result(timeout=60)
    assert sorted(p.name for p in final.iterdir()) == [
        "MANIFEST.json",
        "first.bin",
        "second.bin",
    ]
    assert is_complete(final)


def test_directory_of_a_killed_builder_is_removed(build):
    r"""``kill -9`` during a build: the operating system frees the lock, so the
    next access removes the directory and builds normally."""
    script = (
        "import importlib.util, os, signal, sys\n"
        "spec = importlib.util.spec_from_file_location('cache', sys.argv[1])\n"
        "cache = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(cache)\n"
        "def build(directory):\n"
        "    (directory / 'half.bin').write_bytes(b'half')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "cache.cached_directory('artifact-v1', build)\n"
    )
    source = Path(captum_ext.defaults.cache.__file__)
    done = subprocess.run([sys.executable, "-c", script, str(source)], timeout=120)
    assert done.returncode == -signal.SIGKILL
    assert [n for n in _leftovers(cache_root()) if n.startswith(".artifact-v1.")]
    assert is_complete(cached_directory("artifact-v1", build))
    assert _leftovers(cache_root()) == []


def _torch_load_calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
            yield node


def test_every_torch_load_refuses_pickled_code():
    r"""``torch.load`` unpickles arbitrary code unless ``weights_only=True`` (the
    default only from torch 2.6): a file planted in the cache must not run."""
    package = Path(captum_ext.__file__).parent
    unsafe = []
    for path in sorted(package.rglob("*.py")):
        for call in _torch_load_calls(ast.parse(path.read_text())):
            safe = any(
                k.arg == "weights_only"
                and isinstance(k.value, ast.Constant)
                and k.value.value is True
                for k in call.keywords
            )
            if not safe:
                unsafe.append(f"{path.relative_to(package)}:{call.lineno}")
    assert unsafe == []


def test_a_builder_waits_for_another_with_a_notice(build, capsys):
    r"""A second builder of the same artifact waits for the first (saying so on
    stderr) and reuses its directory instead of building again."""
    started, finish = threading.Event(), threading.Event()

    def slow(directory: Path) -> None:
        started.set()
        assert finish.wait(timeout=60)
        build(directory)

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(cached_directory, "artifact-v1", slow)
        assert started.wait(timeout=60)
        threading.Timer(0.5, finish.set).start()
        second = cached_directory("artifact-v1", build)
        assert first.result(timeout=60) == second
    assert build.calls == 1
    assert "artifact-v1: another process is building it, waiting" in (
        capsys.readouterr().err
    )
