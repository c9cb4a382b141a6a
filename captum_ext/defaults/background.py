#!/usr/bin/env python3
r"""Training the default generators in a second process while the caller
prepares and runs everything else.

On a 2-core CPU the first run's two long preparations fit side by side: the
sentiment classifier's fine-tuning keeps about 1.2 cores busy and a
generator's training one thread (:mod:`captum_ext.defaults.generator`), so
training them one after the other left most of a core idle for 5 minutes.

Nothing is shared but the cache: :func:`captum_ext.defaults.cache.cached_directory`
holds a lock while it builds, so the caller's own
:func:`~captum_ext.defaults.generator.load_default_generator` waits for the
second process's model instead of training it again, and trains it itself
when that process died. The weights are the same either way: a generator is
trained on one thread from a seeded recipe.
"""

import multiprocessing
import os
import sys
from contextlib import contextmanager
from typing import Iterator, List, Sequence

from captum_ext.defaults.generator import (
    generator_cached,
    GeneratorRecipe,
    prepare_default_generator,
)

__all__ = ["generators_trained_alongside"]


@contextmanager
def generators_trained_alongside(
    recipes: Sequence[GeneratorRecipe],
) -> Iterator[List[GeneratorRecipe]]:
    r"""Trains the generators of ``recipes`` the cache lacks in a second
    process while the body runs; yields those recipes (empty: none started).

    On leaving, the process is waited for when the body finished and stopped
    when it raised (its half-built directory is removed by the next cache
    access, :func:`~captum_ext.defaults.cache.remove_orphans`).

    Args:
        recipes (Sequence[GeneratorRecipe]): the generators the body will load,
            in the order it loads them.
    """
    missing = [recipe for recipe in recipes if not generator_cached(recipe)]
    if not missing:
        yield missing
        return
    # spawn, not fork: the caller may hold threads (torch's pool, tqdm's).
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=_train_quietly, args=(missing,), daemon=True)
    process.start()
    try:
        yield missing
    except BaseException:
        process.terminate()
        raise
    finally:
        process.join()


def _train_quietly(recipes: List[GeneratorRecipe]) -> None:
    # Two progress lines rewritten on one terminal garble each other: the
    # caller says what runs here, and a failure shows when the caller trains
    # the model itself.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
    for recipe in recipes:
        prepare_default_generator(recipe)
