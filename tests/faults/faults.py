#!/usr/bin/env python3
r"""Fault injection for tests/faults: a job run in a forked child that is killed
with ``SIGKILL`` at a chosen write, or paused there, and the uninterrupted run
to compare a resumed one with.

Every file the attribution job writes reaches its final name through one
``os.replace`` (the manifest first, then each shard), so the rename is where the
kill points are: before it (a whole temporary file left), before it with the
temporary file cut in half (killed mid-write), and right after it."""

import multiprocessing
import os
import signal
from functools import lru_cache
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, Callable, NoReturn, Optional, ParamSpec, Tuple, TypeVar, Union

import pandas as pd
from captum_ext.evaluation.attribute import attribute_dataset
from captum_ext.evaluation.user_data import LoadedExamples
from torch import nn

from tests.helpers import tiny_labelled_bert, TINY_TEXTS, tiny_tokenizer

P = ParamSpec("P")
R = TypeVar("R")
PathName = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
# (paused, resume): the child sets the first at its point, waits for the second.
Pause = Tuple[Event, Event]

# 9 examples in shards of 4: three shards, the last one short; two are cut.
DATA = LoadedExamples(
    "faults.csv",
    TINY_TEXTS + ["bad bad bad", "the film", "it was not fun and not good at all"],
    labels=[i % 3 for i in range(9)],
)
SHARDS = 3
RENAMES = 1 + SHARDS  # the manifest, then each shard
KILL_POINTS = ["after-lock"] + [
    f"{where}:{n}"
    for n in range(1, RENAMES + 1)
    for where in ("before-rename", "torn-before-rename", "after-rename")
]


@lru_cache(maxsize=None)
def model() -> nn.Module:
    return tiny_labelled_bert()


def tokenizer() -> Any:
    tokenizer = tiny_tokenizer()
    tokenizer.model_max_length = 10
    return tokenizer


def attribute(out: Path, **options: Any) -> Path:
    r"""The job under test: two methods and a metric, three shards."""
    options = {
        "metrics": ["aopc"],
        "batch_size": 3,
        "shard_size": 4,
        "progress": False,
        **options,
    }
    return attribute_dataset(
        model(), tokenizer(), DATA, ["NormXLogit", "AttCAT"], out, **options
    )


@lru_cache(maxsize=None)
def _reference(directory: str) -> pd.DataFrame:
    return pd.read_parquet(attribute(Path(directory)))


def reference(tmp_path_factory: Any) -> pd.DataFrame:
    r"""The uninterrupted run's table (computed once per session)."""
    return _reference(str(tmp_path_factory.getbasetemp() / "faults-reference"))


def assert_same_output(out: Path, expected: pd.DataFrame) -> None:
    r"""``out`` reads back as exactly ``expected`` and holds no leftovers."""
    pd.testing.assert_frame_equal(pd.read_parquet(out), expected, check_exact=True)
    leftovers = [p.name for p in out.iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def _kill() -> NoReturn:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL ends the process")


def _after(act: Callable[[], None], function: Callable[P, R]) -> Callable[P, R]:
    r"""``function`` that calls ``act()`` first."""

    def acted_then(*args: P.args, **kwargs: P.kwargs) -> R:
        act()
        return function(*args, **kwargs)

    return acted_then


def inject(point: str, pause: Optional[Pause] = None) -> None:
    r"""Arms ``point`` in this (child) process: ``after-lock``, or
    ``<where>:<n>`` at the ``n``-th rename. With ``pause`` (a pair of events)
    the process signals ``pause[0]`` at the point and waits for ``pause[1]``
    instead of dying."""
    where, _, n = point.partition(":")

    def act() -> None:
        if pause is None:
            _kill()
        pause[0].set()
        assert pause[1].wait(timeout=60)

    if where == "after-lock":
        from captum_ext.evaluation.attribute import runner

        runner.run_manifest = _after(act, runner.run_manifest)
        return
    real_replace, calls = os.replace, [0]

    # os.replace's own signature, so that every caller's call stays valid.
    def replace(
        src: PathName,
        dst: PathName,
        *,
        src_dir_fd: Optional[int] = None,
        dst_dir_fd: Optional[int] = None,
    ) -> None:
        calls[0] += 1
        if calls[0] == int(n) and where == "torn-before-rename":
            os.truncate(src, os.path.getsize(src) // 2)
        if calls[0] == int(n) and where != "after-rename":
            act()
        real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        if calls[0] == int(n) and where == "after-rename":
            act()

    os.replace = replace


def in_child(
    job: Callable[[], Any], point: str, pause: Optional[Pause] = None
) -> BaseProcess:
    r"""Starts ``job`` in a forked child with ``point`` armed; returns the
    process (``exitcode`` is ``-SIGKILL`` for a kill)."""
    context = multiprocessing.get_context("fork")

    def run() -> None:
        inject(point, pause)
        job()

    child = context.Process(target=run)
    child.start()
    return child
