#!/usr/bin/env python3
r"""An on-disk cache of artifacts the project builds itself (fine-tuned models,
fitted decoders, downloaded package files).

An artifact is a directory. It is built in a temporary sibling directory, gets a
manifest of every file's SHA-256 written last, and is renamed into place, so a
reader never sees a half-written artifact; one whose manifest is missing or does
not match its files is rebuilt. A file lock serialises builders across processes
(pytest-xdist workers, two shells).

A builder that is killed (``kill -9``, a power cut) leaves its temporary
directory ``.<name>.build-<random>`` behind. Every :func:`cached_directory` call
first removes such orphans, and nothing else (``$CAPTUM_EXT_CACHE`` may point
at a directory the user keeps other things in): only directories of exactly
that name shape, beside the lock file ``.<name>.lock`` every builder creates
first. A temporary directory of ``name`` exists only while a builder holds
``name``'s lock, and the operating system releases a dead process's
``flock``, so a temporary directory whose lock can be taken at once has no live
builder. This needs no age threshold and no process ids (which a reboot or
another host sharing the cache would make meaningless). The locks are advisory
``flock`` locks: on a network file system without ``flock`` support the cache
must not be shared by concurrent builders.
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, List, Tuple

__all__ = [
    "cache_root",
    "cached_directory",
    "recipe_fingerprint",
    "remove_orphans",
    "sha256_of",
]

CACHE_ENV = "CAPTUM_EXT_CACHE"
_MANIFEST = "MANIFEST.json"
_BUILD_MARK = ".build-"  # between the artifact's name and tempfile's suffix
# ".<name>.build-<tempfile's 8 random characters>"
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.build-[A-Za-z0-9_]{8}")


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


def recipe_fingerprint(*parts: Any) -> str:
    r"""16 hex digits of the SHA-256 of ``parts`` as JSON with sorted keys:
    the key of a cache name, so that a changed recipe builds anew."""
    text = json.dumps(list(parts), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
def _locked(root: Path, name: str, wait: bool = True) -> Iterator[bool]:
    r"""Holds ``name``'s build lock; yields whether it was taken (always, when
    ``wait``)."""
    with open(_lock_path(root, name), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield False
                return
            print(
                f"{name}: another process is building it, waiting",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _lock_path(root: Path, name: str) -> Path:
    return root / f".{name}.lock"


def _temporary_directories(root: Path) -> Iterator[Tuple[str, Path]]:
    r"""``(artifact name, path)`` of every ``.<name>.build-<random>``
    directory beside its artifact's lock file."""
    for path in root.iterdir():
        shape = _TEMPORARY.fullmatch(path.name)
        if shape is None or not path.is_dir() or path.is_symlink():
            continue
        if _lock_path(root, shape["name"]).is_file():
            yield shape["name"], path


def remove_orphans(root: Path) -> List[Path]:
    r"""Removes the temporary directories of builders that died, returns them.

    A directory ``.<name>.build-<random>`` is an orphan when ``name``'s lock is
    free: builders create it while holding the lock and remove it before
    releasing it, also when the build raises."""
    removed = []
    for name, path in sorted(_temporary_directories(root)):
        with _locked(root, name, wait=False) as free:
            if free:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


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
    remove_orphans(root)
    final = root / name
    with _locked(root, name):
        if is_complete(final):
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}{_BUILD_MARK}", dir=root))
        try:
            build(tmp)
            _write_manifest(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final
