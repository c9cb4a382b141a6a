#!/usr/bin/env python3
r"""Length-bucketed batching: the one rule every loop over examples follows
(fine-tuning and scoring the default models, the benchmark engines, dataset
attribution).

Padding costs time in proportion to the longest row of a batch, so items are
sorted by length before they are cut into batches. It lives on the lowest
floor of the application so that :mod:`captum_ext.defaults` and
:mod:`captum_ext.evaluation` both reach it; the library never batches a
dataset.
"""

from typing import Callable, Iterable, List, TypeVar

__all__ = ["length_sorted_batches"]

Item = TypeVar("Item")


def length_sorted_batches(
    items: Iterable[Item], length: Callable[[Item], int], batch_size: int
) -> List[List[Item]]:
    r"""``items`` sorted by ``length`` (a stable sort: equal lengths keep their
    order) and cut into consecutive batches of ``batch_size``, the last one
    possibly shorter.

    Args:
        items (Iterable): what to batch, e.g. row positions.
        length (Callable): an item's length, e.g. its number of tokens.
        batch_size (int): items per batch, positive.

    Returns:
        list[list]: shortest batches first; together they hold every item once.
    """
    order = sorted(items, key=length)
    return [
        order[start : start + batch_size] for start in range(0, len(order), batch_size)
    ]
