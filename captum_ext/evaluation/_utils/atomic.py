#!/usr/bin/env python3
r"""Files that appear whole or not at all: written under a hidden temporary
name and renamed, so a killed job never leaves a half-written file."""

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, TextIO, Union

__all__ = ["atomic_path", "write_text_atomically"]


@contextmanager
def atomic_path(path: Path, tag: Optional[str] = None) -> Iterator[Path]:
    r"""Yields ``.<name>.tmp-<tag>`` beside ``path`` (``tag`` defaults to the
    process id) and renames it to ``path`` when the block succeeds; the
    temporary file is removed in every case."""
    temporary = path.with_name(f".{path.name}.tmp-{tag or os.getpid()}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(
    path: Union[str, Path], write: Callable[[TextIO], object]
) -> Path:
    r"""A UTF-8 text file written by ``write(handle)`` under the temporary name of
    :func:`atomic_path`, then renamed to ``path`` (returned)."""
    path = Path(path)
    with atomic_path(path) as temporary:
        with temporary.open("w", newline="", encoding="utf-8") as handle:
            write(handle)
    return path
