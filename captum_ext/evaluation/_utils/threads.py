#!/usr/bin/env python3
r"""Torch's CPU threads for the command line's jobs and the default models'
fine-tuning, chosen so that a machine busy with other work does not make the
threads fight (docs/guide/performance.rst has the measurements).

Two settings:

- ``OMP_WAIT_POLICY=PASSIVE``: an OpenMP thread that runs out of work sleeps
  instead of spinning for it. With spinning, a thread that the kernel
  descheduled (another process took its core) keeps its partner spinning at the
  next barrier; a training step took 5x longer with 2 threads than with 1.
  OpenMP reads it once, when torch is first imported: it only takes effect when
  set before that.
- the thread count: one per core this process may run on, less the cores other
  processes keep busy, at least one. Busy means busy for the last minute and
  now: the smaller of the 1-minute load average and the tasks runnable right
  now besides this one (``/proc/loadavg``). The load average alone lags: the
  ``pip install`` just before the README's ``captum-ext benchmark`` kept it
  near 1 on an idle 2-core machine, and the whole job ran on one thread.

A setting the user gave (``OMP_WAIT_POLICY``, ``OMP_NUM_THREADS``) is kept.
"""

import os
import sys
from typing import Optional

__all__ = ["busy_elsewhere", "configure_threads", "free_cores"]


def free_cores(load: Optional[float] = None) -> int:
    r"""The cores this process may run on that other work leaves free: the
    affinity set's size less ``load`` (default: :func:`busy_elsewhere`),
    rounded, at least 1. The count is a hint, not a reservation.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    cores = cores or os.cpu_count() or 1
    if load is None:
        load = busy_elsewhere()
    return max(1, min(cores, round(cores - load)))


def busy_elsewhere(loadavg_path: str = "/proc/loadavg") -> float:
    r"""How many cores other work keeps busy: the smaller of the 1-minute load
    average and the tasks runnable right now less this one, both from one read
    of ``loadavg_path`` (fields 1 and 4, ``running/total``); where the system
    gives no such file, :func:`os.getloadavg` alone, 0 without it either."""
    try:
        with open(loadavg_path) as handle:
            fields = handle.read().split()
        load, running = float(fields[0]), int(fields[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return min(load, max(0, running - 1))


def configure_threads(load: Optional[float] = None) -> int:
    r"""Sets passive OpenMP waiting (when torch is not imported yet) and torch's
    intra-op thread count to :func:`free_cores`, unless the user set
    ``OMP_WAIT_POLICY`` or ``OMP_NUM_THREADS``.

    Call it at the start of a job: the command line's ``main`` does before it
    imports torch (its default models' fine-tuning runs in that process); a
    script that fine-tunes in its own process should too.

    Args:
        load (float, optional): the load average to plan for. Default: the
            system's 1-minute load average.

    Returns:
        int: the number of threads torch will use.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    user_threads = os.environ.get("OMP_NUM_THREADS", "")
    threads = int(user_threads) if user_threads.isdigit() else free_cores(load)
    if "torch" in sys.modules:
        import torch

        torch.set_num_threads(threads)
    elif not user_threads:
        # Read by torch when it starts; no torch import for --help.
        os.environ["OMP_NUM_THREADS"] = str(threads)
    return threads
