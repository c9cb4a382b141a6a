#!/usr/bin/env python3
r"""Finished shards damaged between runs (torn, overwritten, emptied, swapped
with another valid shard, of another schema) are found on resume and redone
with a notice; the output then equals an uninterrupted run's, exactly."""

import os
import shutil
from pathlib import Path
from typing import Callable, Dict

import pyarrow.parquet as pq
import pytest

from tests.faults.faults import assert_same_output, attribute, reference

SHARD = "part-00001.parquet"


def _other_schema(path: Path) -> None:
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["NormXLogit/AOPC"]), path)


DAMAGE: Dict[str, Callable[[Path], object]] = {
    "truncated": lambda path: os.truncate(path, path.stat().st_size // 2),
    "random bytes": lambda path: path.write_bytes(
        bytes(range(256)) * (path.stat().st_size // 256 + 1)
    ),
    "empty": lambda path: path.write_bytes(b""),
    "another valid shard": lambda path: shutil.copy(
        path.with_name("part-00000.parquet"), path
    ),
    "the short last shard": lambda path: shutil.copy(
        path.with_name("part-00002.parquet"), path
    ),
    "another schema": _other_schema,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_shard_is_redone(tmp_path: Path, tmp_path_factory, damage) -> None:
    expected = reference(tmp_path_factory)
    out = attribute(tmp_path / "out")
    DAMAGE[damage](out / SHARD)
    kept = (out / "part-00000.parquet").stat().st_mtime_ns
    with pytest.warns(UserWarning, match=f"{SHARD} is redone: it does not verify"):
        attribute(out)
    assert (out / "part-00000.parquet").stat().st_mtime_ns == kept
    assert_same_output(out, expected)


def test_intact_shards_are_kept_without_a_notice(tmp_path: Path, recwarn) -> None:
    out = attribute(tmp_path / "out")
    written = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*")}
    recwarn.clear()
    attribute(out, batch_size=2)
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("part-*")} == written
    assert [str(w.message) for w in recwarn if "redone" in str(w.message)] == []
