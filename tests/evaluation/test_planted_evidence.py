#!/usr/bin/env python3
r"""Planted-evidence accuracy on hand-made attributions."""

import pytest
import torch
from captum_ext.evaluation.planted_evidence import planted_evidence_accuracy


def test_counts_targets_whose_top_position_is_the_evidence():
    attributions = torch.tensor(
        [
            [[0.1, 0.9, 0.0, 0.2], [0.5, 0.1, 0.3, 0.0]],
            [[0.0, 0.0, 0.1, 1.0], [0.2, 0.1, 0.7, 0.3]],
        ]
    )  # [batch 2, T 2, P 4]
    evidence = torch.tensor([[1, 2], [3, 2]])
    # hits: (0,0) yes, (0,1) no (2nd), (1,0) yes, (1,1) yes
    assert planted_evidence_accuracy(attributions, evidence) == 0.75
    assert planted_evidence_accuracy(attributions, evidence, top_k=2) == 1.0


def test_negative_evidence_is_skipped():
    attributions = torch.tensor([[[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]])
    evidence = torch.tensor([[1, -1]])
    assert planted_evidence_accuracy(attributions, evidence) == 1.0


def test_ties_count_in_expectation_so_constants_score_like_random():
    constant = torch.zeros(3, 2, 5)
    evidence = torch.tensor([[0, 1], [2, 3], [4, 0]])
    assert planted_evidence_accuracy(constant, evidence) == pytest.approx(1 / 5)
    assert planted_evidence_accuracy(constant, evidence, top_k=2) == pytest.approx(
        2 / 5
    )
    # the evidence tied with one other position at the top: half a hit
    tied = torch.tensor([[[1.0, 1.0, 0.0]]])
    assert planted_evidence_accuracy(tied, torch.tensor([[0]])) == 0.5
    # one position strictly above, two tied after it: top-2 gives half a hit
    below = torch.tensor([[[2.0, 1.0, 1.0, 0.0]]])
    assert planted_evidence_accuracy(below, torch.tensor([[1]]), top_k=2) == 0.5


def test_padding_never_outranks_the_evidence():
    # all-negative scores: padding's zeros would win without the mask
    attributions = torch.tensor([[[0.0, 0.0, -1.0, -3.0]]])
    mask = torch.tensor([[0, 0, 1, 1]])
    evidence = torch.tensor([[2]])
    assert planted_evidence_accuracy(attributions, evidence) == pytest.approx(0.0)
    assert planted_evidence_accuracy(attributions, evidence, mask) == 1.0


def test_equals_a_naive_loop_on_random_scores():
    generator = torch.Generator().manual_seed(0)
    attributions = torch.randn(6, 3, 9, generator=generator)
    evidence = torch.randint(0, 9, (6, 3), generator=generator)
    for k in (1, 3):
        hits = [
            int(evidence[b, t] in attributions[b, t].topk(k).indices)
            for b in range(6)
            for t in range(3)
        ]
        assert planted_evidence_accuracy(attributions, evidence, top_k=k) == (
            pytest.approx(sum(hits) / len(hits))
        )


def test_evidence_sets_equal_a_naive_loop_on_random_scores():
    generator = torch.Generator().manual_seed(1)
    attributions = torch.randn(5, 3, 8, generator=generator)
    sets = torch.stack([torch.randperm(8, generator=generator)[:3] for _ in range(15)])
    sets = sets.view(5, 3, 3)
    sets[0, 1, 2] = sets[1, 0, 1:] = -1  # sets of 2 and 1 positions
    sets[2, 2] = -1  # a target without evidence
    for k in (1, 2, 3):
        shares = []
        for b in range(5):
            for t in range(3):
                wanted = [int(p) for p in sets[b, t] if p >= 0]
                if wanted:
                    top = attributions[b, t].topk(k).indices.tolist()
                    found = len(set(wanted) & set(top))
                    shares.append(found / min(k, len(wanted)))
        assert planted_evidence_accuracy(attributions, sets, top_k=k) == (
            pytest.approx(sum(shares) / len(shares))
        )


def test_a_set_of_one_is_the_single_position_and_ties_count_in_expectation():
    generator = torch.Generator().manual_seed(2)
    attributions = torch.randn(4, 2, 6, generator=generator)
    evidence = torch.randint(0, 6, (4, 2), generator=generator)
    for k in (1, 3):
        single = planted_evidence_accuracy(attributions, evidence, top_k=k)
        one = planted_evidence_accuracy(attributions, evidence[..., None], top_k=k)
        assert one == single
    # constant scores: each of the 2 evidence positions is in the top 3 of 6
    # with probability 1/2, so 1/2 of the set on average
    constant = torch.zeros(1, 1, 6)
    pair = torch.tensor([[[1, 4]]])
    assert planted_evidence_accuracy(constant, pair, top_k=3) == pytest.approx(0.5)
    assert planted_evidence_accuracy(constant, pair, top_k=1) == pytest.approx(2 / 6)


@pytest.mark.parametrize(
    "attributions, evidence, mask, top_k, message",
    [
        (torch.zeros(2, 3), torch.zeros(2, 3), None, 1, "must be"),
        (torch.zeros(1, 2, 3), torch.zeros(1, 2), None, 1, "integer positions"),
        (torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), None, 0, "top_k"),
        (torch.zeros(1, 1, 3), torch.tensor([[3]]), None, 1, "< P = 3"),
        (torch.zeros(1, 1, 3), torch.tensor([[-1]]), None, 1, "no target"),
        (torch.full((1, 1, 3), torch.nan), torch.tensor([[0]]), None, 1, "NaN"),
        (
            torch.zeros(1, 1, 3),
            torch.tensor([[0]]),
            torch.tensor([[0, 1, 1]]),
            1,
            "padding",
        ),
        (torch.zeros(1, 1, 3), torch.tensor([[0]]), torch.ones(1, 2), 1, "mask"),
    ],
)
def test_bad_inputs_are_refused(attributions, evidence, mask, top_k, message):
    with pytest.raises(ValueError, match=message):
        planted_evidence_accuracy(attributions, evidence, mask, top_k)
