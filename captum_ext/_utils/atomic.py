#!/usr/bin/env python3
r"""Files that appear whole or not at all: written under a hidden temporary
name and renamed, so a killed job never leaves a half-written file."""

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

__all__ = ["atomic_path"]


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
