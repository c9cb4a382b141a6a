#!/usr/bin/env python3
r"""Shards of an attribution run: shard ``k`` holds examples
``k * shard_size`` to ``(k + 1) * shard_size - 1`` of the data, in data order,
as ``part-<k>.parquet``, written under a hidden temporary name and renamed when
complete."""

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from captum_ext._utils.atomic import atomic_path

__all__ = ["shard_name", "shard_positions", "write_shard"]


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
