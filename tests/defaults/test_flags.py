#!/usr/bin/env python3
r"""Flag sum: determinism, the label decided by both flags and copied from
neither, the evidence sets through the tokenizer, the training rows."""

import random
from collections import Counter
from typing import Dict

import pytest
import torch
from captum_ext.defaults.flags import FlagTask, QUERY
from captum_ext.defaults.recall import encode_examples, recall_tokenizer

TASK = FlagTask()


def test_same_seed_same_examples_other_seed_other_examples() -> None:
    assert TASK.sample(50, seed=3) == TASK.sample(50, seed=3)
    assert TASK.sample(50, seed=3) != TASK.sample(50, seed=4)


def test_the_label_is_the_flag_sum_and_stands_nowhere_in_the_prompt() -> None:
    for example in TASK.sample(300, seed=0):
        words = example.prompt.split()
        assert words[-1] == QUERY
        assert TASK.min_words <= len(words) - 1 <= TASK.max_words
        (places,) = example.needed
        assert [p for p, w in enumerate(words) if w.startswith("f")] == list(places)
        total = sum(int(words[p][1:]) for p in places)
        assert example.continuation == f"a{total % TASK.n_flags}"
        assert example.continuation not in words
        assert example.evidence == () and example.key_position == -1


def test_either_flag_alone_leaves_every_label_equally_likely() -> None:
    examples = TASK.sample(4000, seed=1)
    by_first = Counter(
        (e.prompt.split()[e.needed[0][0]], e.continuation) for e in examples
    )
    for flag in range(TASK.n_flags):
        counts = [by_first[(f"f{flag}", f"a{a}")] for a in range(TASK.n_flags)]
        assert max(counts) < 1.35 * min(counts)


def test_encoded_sets_point_at_the_flags() -> None:
    tokenizer = recall_tokenizer(TASK)
    examples = TASK.sample(16, seed=2)
    batch = encode_examples(examples, tokenizer, end_token=True)
    assert batch.needed.shape == (16, 2, 2)
    assert bool((batch.needed[:, 1] == -1).all())  # <eos> needs nothing planted
    assert bool((batch.evidence == -1).all()) and bool((batch.key_position == -1).all())
    rows = torch.arange(16)[:, None]
    flags = tokenizer.convert_ids_to_tokens(
        batch.input_ids[rows, batch.needed[:, 0]].flatten().tolist()
    )
    assert all(word.startswith("f") for word in flags)


def test_training_row_labels_the_answer_and_eos_only() -> None:
    example = TASK.sample(1, seed=5)[0]
    words, labelled = TASK.training_row(example, 4, random.Random(0))
    assert words[1:-2] == example.prompt.split()
    assert [w for w, y in zip(words, labelled) if y] == [example.continuation, "<eos>"]
    assert len(words) <= TASK.longest_row(4)


@pytest.mark.parametrize("options", [dict(min_words=1), dict(n_flags=1)])
def test_bad_task_is_refused(options: Dict[str, int]) -> None:
    with pytest.raises(ValueError, match="need"):
        FlagTask(**options)
