#!/usr/bin/env python3
import pytest
import torch
from captum_ext.metrics import average_precision, TokenOptions

from tests.metrics.toys import batch_with_scores


def _normxlogit_avg_precision(topk, cue_indices):
    # NormXLogit, Experiment 2 (BLiMP), avg_precision, copied in spirit.
    previous_recall, ap, tp, fp, fn = 0.0, 0.0, 0, 0, len(cue_indices)
    for index in topk:
        if index in cue_indices:
            tp, fn = tp + 1, fn - 1
        else:
            fp += 1
        recall = tp / (tp + fn)
        ap += (recall - previous_recall) * tp / (tp + fp)
        previous_recall = recall
    return ap


@pytest.mark.parametrize("pad_side", ["right", "left"])
def test_matches_the_reference(pad_side):
    batch = batch_with_scores((9, 5, 12, 7), pad_side=pad_side, seed=3)
    generator = torch.Generator().manual_seed(0)
    evidence = torch.rand(batch["scores"].shape, generator=generator) < 0.3
    evidence &= batch["attention_mask"].bool() & ~batch["special"]
    ap = average_precision(
        batch["input_ids"],
        batch["scores"],
        evidence,
        batch["attention_mask"],
        tokens=TokenOptions(special_tokens_mask=batch["special"]),
    )
    for row in range(4):
        ranked = (
            batch["attention_mask"][row].bool() & ~batch["special"][row]
        ).nonzero()
        positions = ranked.flatten().tolist()
        order = sorted(positions, key=lambda p: -batch["scores"][row, p].item())
        cues = evidence[row].nonzero().flatten().tolist()
        if not cues:
            assert torch.isnan(ap[row])
            continue
        expected = _normxlogit_avg_precision(order, cues)
        assert ap[row].item() == pytest.approx(expected, abs=1e-6)


def test_hand_worked_with_ties_and_no_evidence():
    ids = torch.tensor([[2, 10, 11, 12, 13, 3]]).expand(2, -1)
    # Ties between positions 2 and 3 go to the lower one: order 1, 2, 3, 4.
    scores = torch.tensor([[9.0, 4.0, 2.0, 2.0, 1.0, 9.0]]).expand(2, -1)
    # Evidence on a special token is ignored: row 1 has none, hence NaN.
    evidence = torch.tensor([[0, 1, 0, 1, 0, 0], [1, 0, 0, 0, 0, 1]])
    ap = average_precision(
        ids, scores, evidence, tokens=TokenOptions(special_token_ids=[2, 3])
    )
    assert ap[0].item() == pytest.approx((1 / 1 + 2 / 3) / 2)
    assert torch.isnan(ap[1])


def test_wrong_evidence_shape():
    ids = torch.tensor([[2, 10, 3]])
    with pytest.raises(ValueError, match="evidence_mask"):
        average_precision(ids, torch.ones(1, 3), torch.ones(1, 2))
