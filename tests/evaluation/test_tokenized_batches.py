#!/usr/bin/env python3
r"""bucketed_batches: the padded rows are exactly what the tokenizer gives for each
text (truncated where too long), batches are sorted by length and cover every
example once."""

import pytest
from captum_ext.evaluation.tokenized_batches import bucketed_batches

from tests.helpers import TINY_TEXTS, tiny_tokenizer

PAIRS = ["good", "very bad", "it was fun", "the plot", "not great", "awful"]


@pytest.mark.parametrize("pairs", [None, PAIRS])
def test_rows_equal_the_tokenizer_with_truncation(pairs) -> None:
    tokenizer = tiny_tokenizer()
    max_length = 8
    batches = bucketed_batches(
        tokenizer, TINY_TEXTS, pairs, batch_size=4, max_length=max_length
    )
    assert sorted(row for b in batches for row in b.rows) == list(
        range(len(TINY_TEXTS))
    )
    lengths = [int(m.sum()) for b in batches for m in b.attention_mask]
    assert lengths == sorted(lengths)
    reference = tokenizer(TINY_TEXTS, pairs, truncation=True, max_length=max_length)
    untruncated = tokenizer(TINY_TEXTS, pairs)["input_ids"]
    assert any(len(ids) > max_length for ids in untruncated)
    for batch in batches:
        assert (batch.token_type_ids is None) == (pairs is None)
        for row, index in enumerate(batch.rows):
            n = int(batch.attention_mask[row].sum())
            assert batch.input_ids[row, :n].tolist() == reference["input_ids"][index]
            assert (batch.input_ids[row, n:] == tokenizer.pad_token_id).all()
            assert batch.truncated[row] == (len(untruncated[index]) > max_length)
            if batch.token_type_ids is not None:
                types = batch.token_type_ids[row, :n].tolist()
                assert types == reference["token_type_ids"][index]
                assert batch.forward_args() == (
                    batch.attention_mask,
                    batch.token_type_ids,
                )


def test_tokenizer_without_pad_token() -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.pad_token = None
    with pytest.raises(ValueError, match="no pad token"):
        bucketed_batches(tokenizer, TINY_TEXTS, batch_size=2, max_length=8)
