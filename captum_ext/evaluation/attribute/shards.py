#!/usr/bin/env python3
r"""Shards of an attribution run: shard ``k`` holds examples
``k * shard_size`` to ``(k + 1) * shard_size - 1`` of the data, in data order,
as ``part-<k>.parquet``, written under a hidden temporary name and renamed when
complete."""

import os
from pathlib import Path
from typing import Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from captum_ext.evaluation._utils.atomic import atomic_path
from captum_ext.evaluation.attribute.manifest import MANIFEST

__all__ = [
    "remove_temporary_files",
    "shard_name",
    "shard_positions",
    "shard_problem",
    "write_shard",
]


def shard_name(shard: int) -> str:
    return f"part-{shard:05d}.parquet"


def shard_positions(shard: int, shard_size: int, n: int) -> range:
    r"""The data positions of ``shard`` among ``n`` examples."""
    return range(shard * shard_size, min((shard + 1) * shard_size, n))


def write_shard(table: pa.Table, path: Path, rank: int) -> None:
    r"""Writes under a hidden name and renames, so readers and reruns only ever
    see complete shards."""
    with atomic_path(path, tag=f"{rank}-{os.getpid()}") as temporary:
        pq.write_table(table, temporary)


def remove_temporary_files(out: Path) -> None:
    r"""Removes the temporary shard and manifest files of runs that are gone
    (the caller holds the output lock, so no live run owns one); nothing else
    in ``out`` is touched."""
    for pattern in (".part-*.parquet.tmp-*", f".{MANIFEST}.tmp-*"):
        for stale in out.glob(pattern):
            stale.unlink(missing_ok=True)


def shard_problem(path: Path, ids: Sequence[int], schema: pa.Schema) -> Optional[str]:
    r"""Why the finished shard at ``path`` is not the one a run of ``schema``
    writes for the examples ``ids``, or None when it is: a file that cannot be
    read whole (torn, overwritten, empty), another schema, or other rows (a
    shard of another slice copied over it)."""
    try:
        table = pq.ParquetFile(path).read()
    except (OSError, pa.ArrowException) as error:
        return f"unreadable: {error}"
    if not table.schema.equals(schema):
        return "its columns are not this run's"
    if table.num_rows != len(ids):
        return f"{table.num_rows} rows instead of {len(ids)}"
    if table.column("id").to_pylist() != list(ids):
        return "its rows are not the examples of its slice"
    return None
