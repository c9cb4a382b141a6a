#!/usr/bin/env python3
r"""An on-disk cache of artifacts the project builds itself (fine-tuned models,
fitted decoders, downloaded package files).

An artifact is a directory. It is built in a temporary sibling directory, gets a
manifest of every file's SHA-256 written last, and is renamed into place, so a
reader never sees a half-written artifact; one whose manifest is missing or does
not match its files is rebuilt. A file lock serialises builders across processes
(pytest-xdist workers, two shells).
"""

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

__all__ = ["cache_root", "cached_directory", "sha256_of"]

CACHE_ENV = "CAPTUM_EXT_CACHE"
_MANIFEST = "MANIFEST.json"


def cache_root() -> Path:
    r"""``$CAPTUM_EXT_CACHE``, else ``$XDG_CACHE_HOME/captum_ext``, else
    ``~/.cache/captum_ext``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        root = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
        root = Path(base) / "captum_ext"
    root.mkdir(parents=True, exist_ok=True)
    return root


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.name != _MANIFEST:
            yield path


def _write_manifest(directory: Path) -> None:
    manifest = {str(p.relative_to(directory)): sha256_of(p) for p in _files(directory)}
    (directory / _MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))


def is_complete(directory: Path) -> bool:
    r"""True when ``directory`` holds exactly the files of its manifest, intact."""
    try:
        manifest = json.loads((directory / _MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    found = {str(p.relative_to(directory)): p for p in _files(directory)}
    if set(found) != set(manifest):
        return False
    return all(sha256_of(found[name]) == digest for name, digest in manifest.items())


@contextmanager
def _locked(root: Path, name: str) -> Iterator[None]:
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_directory(name: str, build: Callable[[Path], None]) -> Path:
    r"""Returns the cache directory ``name``, building it with ``build(tmp_dir)``
    first when it is missing or corrupted.

    Args:
        name (str): directory name under :func:`cache_root`; put a version in it so
            a changed recipe builds anew.
        build (Callable[[Path], None]): writes the artifact's files into the empty
            directory it is given.
    """
    root = cache_root()
    final = root / name
    with _locked(root, name):
        if is_complete(final):
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
        try:
            build(tmp)
            _write_manifest(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
