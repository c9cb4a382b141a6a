#!/usr/bin/env python3
r"""One writer per output directory.

A run holds an advisory ``flock`` on ``<out>/.lock`` from before it reads the
manifest until its last shard is written, and writes who it is (process id,
host, start time) into the file. A second run into the same directory is
refused at once with that holder named, before it computes anything or touches
a file. The operating system releases the lock of a process that dies
(``kill -9``, a crash), so a stale lock is taken over without any age rule, and
every temporary file found while holding the lock belongs to a run that is gone.

The lock is as good as the file system's ``flock``: local file systems and NFS
v4 honour it; on a shared file system without it, do not start two runs into
one directory.
"""

import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["LOCK", "OutputLockedError", "output_lock"]

LOCK = ".lock"  # "." prefix: Parquet readers skip it


class OutputLockedError(OSError):
    r"""Another run is writing into the output directory."""


@contextmanager
def output_lock(out: Path) -> Iterator[None]:
    r"""Holds ``out``'s lock for the block, or raises
    :class:`OutputLockedError` naming the run that holds it."""
    path = out / LOCK
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputLockedError(
                f"{out} is being written by another run ({_holder(path)}); wait "
                "for it to finish, or choose another --out directory"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            json.dump(
                {"pid": os.getpid(), "host": socket.gethostname(), "start": _now()},
                handle,
            )
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return (
            f"process {holder['pid']} on host {holder['host']}, started "
            f"{holder['start']}"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not yet said who it is"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z")
