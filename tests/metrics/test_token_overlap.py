#!/usr/bin/env python3
import pytest
import torch
from captum_ext.metrics import token_overlap

from tests.helpers import CLS_ID, PAD_ID, SEP_ID
from tests.metrics.toys import bag_of_words, TOKENS


def _batch(rows):
    width = max(len(ids) for ids, _ in rows) + 2
    ids = torch.full((len(rows), width), PAD_ID)
    scores = torch.zeros(len(rows), width)
    mask = torch.zeros_like(ids)
    for i, (tokens, values) in enumerate(rows):
        n = len(tokens) + 2
        ids[i, :n] = torch.tensor([CLS_ID, *tokens, SEP_ID])
        scores[i, 1 : n - 1] = torch.tensor(values)
        scores[i, 0] = 100.0  # specials are never counted
        mask[i, :n] = 1
    return ids, scores, mask


def test_two_classes_with_and_without_idf():
    ids, scores, mask = _batch(
        [
            ([10, 11, 12], [3.0, 2.0, 1.0]),
            ([10, 13, 14], [5.0, 4.0, -1.0]),
            ([13], [2.5]),
        ]
    )
    model = bag_of_words(2)
    args = (model, ids, scores, [0, 1, 0], mask)
    # Class 0 sums: 10: 3, 11: 2, 12: 1, 13: 2.5; class 1: 10: 5, 13: 4, 14: -1.
    plain = token_overlap(*args, top_k=2, tokens=TOKENS)
    assert plain.top_tokens.tolist() == [[10, 13], [10, 13]]
    assert plain.score.item() == pytest.approx(1.0)
    idf = torch.ones(99)
    idf[10] = 0.1
    weighted = token_overlap(*args, top_k=2, idf=idf, tokens=TOKENS)
    assert weighted.top_tokens.tolist() == [[13, 11], [13, 10]]
    assert weighted.score.item() == pytest.approx(0.5)
    assert weighted.classes.tolist() == [0, 1]


def test_three_classes_and_short_classes():
    ids, scores, mask = _batch(
        [([10, 11], [2.0, 1.0]), ([10, 12], [2.0, 1.0]), ([13], [1.0])]
    )
    result = token_overlap(
        bag_of_words(3),
        ids,
        scores,
        [0, 1, 2],
        mask,
        top_k=2,
        tokens=TOKENS,
    )
    # Pairs share 1, 0 and 0 tokens: 1 / (3 pairs * 2).
    assert result.score.item() == pytest.approx(1 / 6)
    assert result.top_tokens.tolist() == [[10, 11], [10, 12], [13, -1]]


def test_ties_go_to_the_lower_token_id_and_one_class_is_nan():
    ids, scores, mask = _batch([([12, 11, 10], [1.0, 1.0, 1.0])])
    result = token_overlap(
        bag_of_words(2), ids, scores, 0, mask, top_k=2, tokens=TOKENS
    )
    assert result.top_tokens.tolist() == [[10, 11]]
    assert torch.isnan(result.score)


def test_predicted_class_by_default():
    ids, scores, mask = _batch([([10, 11], [1.0, 2.0]), ([12], [1.0])])
    model = bag_of_words(2, seed=3)
    with torch.no_grad():
        predicted = model(ids, mask).argmax(-1)
    result = token_overlap(model, ids, scores, None, mask, tokens=TOKENS)
    assert result.classes.tolist() == sorted(set(predicted.tolist()))
