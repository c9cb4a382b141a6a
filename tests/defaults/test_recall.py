#!/usr/bin/env python3
r"""Key–value recall: determinism, evidence by construction, the tokenizer."""

import pytest
import torch
from captum_ext._utils.teacher_forcing import IGNORE_INDEX
from captum_ext.defaults.recall import (
    encode_examples,
    EOS,
    recall_tokenizer,
    RecallTask,
)
from transformers import PreTrainedTokenizerFast

TASK = RecallTask()


def test_same_seed_same_examples_other_seed_other_examples():
    assert TASK.sample(50, seed=3) == TASK.sample(50, seed=3)
    assert TASK.sample(50, seed=3) != TASK.sample(50, seed=4)


def test_examples_vary_in_length_and_plant_distractors():
    examples = TASK.sample(300, seed=0)
    pairs = {e.prompt.count(";") for e in examples}
    assert pairs == set(range(TASK.min_pairs, TASK.max_pairs + 1))
    # the predicted token also stands somewhere that is not its evidence
    distracted = [
        e
        for e in examples
        if any(e.prompt.split().count(value) > 1 for value in e.continuation.split())
    ]
    assert 0.2 < len(distracted) / len(examples) < 0.9


def test_evidence_is_the_queried_pairs_values_by_construction():
    for example in TASK.sample(200, seed=1):
        words = example.prompt.split()
        queried = words[-1]
        assert words[-2] == ";" and words.count(queried) == 2  # unique key
        assert words[example.key_position] == queried
        values = [words[p] for p in example.evidence]
        assert values == example.continuation.split()
        assert list(example.evidence) == [
            example.key_position + 1 + t for t in range(TASK.values_per_key)
        ]


def test_encoded_evidence_token_is_the_target_token():
    tokenizer = recall_tokenizer(TASK)
    examples = TASK.sample(64, seed=2)
    batch = encode_examples(examples, tokenizer, end_token=True)
    assert batch.input_ids.shape == batch.attention_mask.shape
    rows = torch.arange(len(examples))[:, None]
    has_evidence = batch.evidence >= 0
    # every value step has evidence; <eos> has none
    assert bool(has_evidence[:, : TASK.values_per_key].all())
    assert bool((batch.target[:, -1] == tokenizer.eos_token_id).all())
    assert bool((batch.evidence[:, -1] == -1).all())
    at_evidence = batch.input_ids[rows, batch.evidence.clamp(min=0)]
    assert torch.equal(at_evidence[has_evidence], batch.target[has_evidence])
    key_ids = batch.input_ids[torch.arange(len(examples)), batch.key_position]
    assert torch.equal(key_ids, batch.input_ids[:, -1])  # the query's key
    # left padding: every prompt ends at the last column, starts with <bos>
    first = batch.attention_mask.argmax(1)
    assert bool((batch.input_ids[torch.arange(len(examples)), first] == 2).all())
    assert bool(batch.attention_mask[:, -1].all())
    assert IGNORE_INDEX not in batch.target[:, : TASK.values_per_key]


def test_tokenizer_round_trip_and_save_load(tmp_path):
    tokenizer = recall_tokenizer(TASK)
    example = TASK.sample(1, seed=5)[0]
    ids = tokenizer(example.prompt)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert len(ids) == len(example.prompt.split()) + 1  # one token per word
    assert tokenizer.decode(ids, skip_special_tokens=True) == example.prompt
    assert tokenizer.decode(ids[:1]) == "<bos>"
    assert tokenizer.convert_tokens_to_ids(EOS) == tokenizer.eos_token_id
    assert tokenizer("k1 = zzz")["input_ids"][-1] == tokenizer.unk_token_id == 0
    tokenizer.save_pretrained(tmp_path)
    loaded = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    assert loaded(example.prompt)["input_ids"] == ids
    assert loaded.padding_side == "left"
    assert loaded.pad_token_id == tokenizer.pad_token_id


def test_unique_keys_allow_hundreds_of_pairs_with_the_query_unique():
    task = RecallTask(min_pairs=100, max_pairs=120, unique_keys=3)
    for example in task.sample(20, seed=0):
        words = example.prompt.split()
        keys = words[:-1:4]  # k v v ;
        assert 100 <= len(keys) <= 120
        assert words.count(words[-1]) == 2  # the query and its own pair
        assert words[example.key_position] == words[-1]
        assert [words[p] for p in example.evidence] == example.continuation.split()
        assert sum(keys.count(k) == 1 for k in set(keys)) >= 3


def test_extra_training_queries_ask_only_keys_that_occur_once():
    import random

    task = RecallTask(min_pairs=40, max_pairs=40, unique_keys=5)
    example = task.sample(1, seed=3)[0]
    words, labelled = task.training_row(example, 10, random.Random(0))
    keys = example.prompt.split()[:-1:4]
    queried = [w for w, y in zip(words[1:], labelled[1:]) if w.startswith("k")]
    asked = queried[len(keys) :]  # after the prompt's own keys
    once = [k for k in keys if keys.count(k) == 1]  # the 5 own keys, and by chance
    assert len(asked) == 1 + min(10, len(once) - 1) and set(asked) <= set(once)
    assert asked[0] == example.prompt.split()[-1]


@pytest.mark.parametrize(
    "options",
    [
        dict(min_pairs=0),
        dict(max_pairs=40),
        dict(values_per_key=0),
        dict(unique_keys=0),
        dict(unique_keys=3, min_pairs=2),
        dict(unique_keys=32, min_pairs=40, max_pairs=40),
    ],
)
def test_bad_task_is_refused(options):
    with pytest.raises(ValueError, match="need 1 <="):
        RecallTask(**options)
