#!/usr/bin/env python3
r"""The artifact cache rebuilds a corrupted or incomplete directory and never
exposes a half-built one. A tiny build function stands in for fine-tuning."""

import json
from pathlib import Path
from typing import List

import pytest
from captum_ext._utils.cache import cache_root, cached_directory, is_complete


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
