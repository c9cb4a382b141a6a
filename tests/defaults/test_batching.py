#!/usr/bin/env python3
r"""length_sorted_batches: every item once, shortest batches first, equal
lengths in their given order, full batches but the last."""

from captum_ext.defaults.batching import length_sorted_batches


def test_batches_are_length_sorted_stable_and_cover_every_item_once():
    lengths = {10: 3, 11: 1, 12: 3, 13: 2, 14: 1, 15: 3, 16: 2}
    batches = length_sorted_batches(
        [16, 15, 14, 13, 12, 11, 10], lengths.__getitem__, 3
    )
    # Lengths 1, 1 | 2, 2 | 3, 3, 3; ties keep the order they were given in.
    assert batches == [[14, 11, 16], [13, 15, 12], [10]]
    assert sorted(i for batch in batches for i in batch) == sorted(lengths)


def test_no_items_give_no_batches():
    assert length_sorted_batches([], len, 4) == []
