#!/usr/bin/env python3
r"""Runs across processes with ``torch.distributed``, as started by ``torchrun``.

Under ``torchrun --nproc-per-node N [--nnodes M ...]`` every process sees
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; :func:`distributed_context` then
joins the process group (NCCL when the device is CUDA, gloo otherwise) and
leaves it at exit. Without those variables it is a one-process context, so the
same code runs unchanged from a plain ``python`` call.

Rows are dealt to ranks round-robin over a fixed order (``rows[rank::world]``),
so each rank's share depends only on the data and the world size.
"""

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, TypeVar

import torch
import torch.distributed as dist

__all__ = ["DistributedContext", "distributed_context"]

T = TypeVar("T")


@dataclass(frozen=True)
class DistributedContext:
    r"""This process's place in the job: ``rank`` of ``world_size``, and the
    device it should use (``cuda:LOCAL_RANK`` on GPUs)."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        r"""True on rank 0, which writes the shared outputs (manifest, report)."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    def shard(self, items: Sequence[T]) -> List[T]:
        r"""This rank's share of ``items``: ``items[rank::world_size]``."""
        return list(items[self.rank :: self.world_size])

    def gather(self, obj: Any) -> Optional[List[Any]]:
        r"""Every rank's ``obj`` in rank order on rank 0, ``None`` elsewhere."""
        if not self.is_distributed:
            return [obj]
        gathered: Optional[List[Any]] = (
            [None] * self.world_size if self.is_main else None
        )
        dist.gather_object(obj, gathered, dst=0)
        return gathered

    def broadcast(self, obj: Any) -> Any:
        r"""Rank 0's ``obj`` on every rank."""
        if not self.is_distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.is_distributed:
            dist.barrier()


def _device_for(requested: str, local_rank: int) -> torch.device:
    device = torch.device(requested)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", local_rank)
    return device


@contextmanager
def distributed_context(device: str = "cpu") -> Iterator[DistributedContext]:
    r"""Joins the ``torchrun`` process group if there is one, else runs alone.

    Args:
        device (str): ``"cpu"`` or ``"cuda"``; under ``torchrun`` a bare
            ``"cuda"`` becomes ``cuda:LOCAL_RANK``. Default: ``"cpu"``.

    Yields:
        DistributedContext: rank, world size and device of this process.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        yield DistributedContext(device=torch.device(device))
        return
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    chosen = _device_for(device, local_rank)
    joined = not dist.is_initialized()
    if joined:
        if chosen.type == "cuda":
            torch.cuda.set_device(chosen)
        dist.init_process_group("nccl" if chosen.type == "cuda" else "gloo")
    try:
        yield DistributedContext(rank, world_size, chosen)
    finally:
        if joined:
            dist.destroy_process_group()
