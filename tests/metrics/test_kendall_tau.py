#!/usr/bin/env python3
import numpy as np
import pytest
import scipy.stats
import torch
from captum_ext.metrics import kendall_tau, KendallProtocol, TokenOptions
from captum_ext.metrics._utils.ranking import kendall_tau_b

from tests.metrics.toys import bag_of_words, batch_with_scores, lively_forward


def _scipy(x, y):
    return scipy.stats.kendalltau(np.asarray(x), np.asarray(y))[0]


def test_tau_b_equals_scipy_with_ties():
    generator = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (200, 12), generator=generator).double()
    y = torch.randint(0, 3, (200, 12), generator=generator).double()
    lengths = torch.randint(2, 13, (200,), generator=generator)
    include = torch.arange(12)[None, :] < lengths[:, None]
    ours = kendall_tau_b(x, y, include)
    for row in range(200):
        n = int(lengths[row])
        expected = _scipy(x[row, :n], y[row, :n])
        if np.isnan(expected):
            assert torch.isnan(ours[row])
        else:
            assert ours[row].item() == pytest.approx(expected, abs=1e-12)


def _table(batch, classes, seed=0, ties=False):
    generator = torch.Generator().manual_seed(seed)
    shape = (len(batch["input_ids"]), classes, batch["input_ids"].shape[1])
    if ties:
        return torch.randint(0, 3, shape, generator=generator).float()
    return torch.randn(shape, generator=generator)


def _rows(batch, table, row, cls):
    keep = batch["attention_mask"][row].bool()
    return table[row, cls][keep].numpy()


@pytest.mark.parametrize("pad_side", ["right", "left"])
@pytest.mark.parametrize("ties", [False, True])
def test_reference_preset_matches_attcat_code(pad_side, ties):
    # AttCAT's cal_kendaltau: scipy's tau between np.argsort(-S_c) and
    # np.argsort(-S_c') over every real token, c' = 1 - c for two classes.
    model = bag_of_words(2)
    batch = batch_with_scores((9, 4, 12, 2), pad_side=pad_side)
    table = _table(batch, 2, ties=ties)
    labels = torch.tensor([0, 1, 1, 0])
    tau = kendall_tau(
        model,
        batch["input_ids"],
        table,
        labels,
        batch["attention_mask"],
        preset="attcat",
    )
    for row in range(4):
        c = int(labels[row])
        first = np.argsort(-_rows(batch, table, row, c), kind="stable")
        second = np.argsort(-_rows(batch, table, row, 1 - c), kind="stable")
        assert tau[row].item() == pytest.approx(_scipy(first, second), abs=1e-6)


@pytest.mark.parametrize("compare", ["argsort", "scores"])
def test_mean_over_other_classes(compare):
    model = lively_forward("bert", num_labels=4)
    batch = batch_with_scores((9, 5, 12), seed=2)
    table = _table(batch, 4, seed=3, ties=compare == "scores")
    tau = kendall_tau(
        model,
        batch["input_ids"],
        table,
        None,
        (batch["attention_mask"],),
        preset=KendallProtocol(compare=compare),
        tokens=TokenOptions(special_tokens_mask=batch["special"]),
    )
    with torch.no_grad():
        predicted = model(batch["input_ids"], batch["attention_mask"]).argmax(-1)
    for row in range(3):
        content = (batch["attention_mask"][row].bool() & ~batch["special"][row]).numpy()
        own = table[row, int(predicted[row])].numpy()[content]
        taus = []
        for other in range(4):
            if other == int(predicted[row]):
                continue
            theirs = table[row, other].numpy()[content]
            if compare == "argsort":
                own_, theirs_ = (np.argsort(-s, kind="stable") for s in (own, theirs))
                taus.append(_scipy(own_, theirs_))
            else:
                taus.append(_scipy(own, theirs))
        assert tau[row].item() == pytest.approx(np.mean(taus), abs=1e-6)


@pytest.mark.parametrize("classes,expected", [(2, [1, 0, 1]), (3, [1, 0, 1])])
def test_reference_other_class(classes, expected):
    # c' = 1 - c for two classes; else 1 if c == 0 else c - 1.
    model = bag_of_words(classes)
    batch = batch_with_scores((6, 6, 6))
    targets = torch.tensor([0, 1, 2]) if classes == 3 else torch.tensor([0, 1, 0])
    seen = []

    def attribution_fn(target):
        seen.append(target.tolist())
        return batch["scores"] * (1 + target[:, None])

    kendall_tau(
        model,
        batch["input_ids"],
        attribution_fn,
        targets,
        batch["attention_mask"],
        preset=KendallProtocol(other="reference"),
    )
    assert seen == [targets.tolist(), expected]


def test_callable_equals_table():
    model = bag_of_words(3)
    batch = batch_with_scores((9, 5, 12), seed=4)
    table = _table(batch, 3, seed=5)
    rows = torch.arange(3)
    args = (model, batch["input_ids"])
    from_table = kendall_tau(*args, table, None, batch["attention_mask"])
    from_fn = kendall_tau(
        *args, lambda t: table[rows, t], None, batch["attention_mask"]
    )
    torch.testing.assert_close(from_table, from_fn)


def test_identical_rankings_give_one_and_single_token_nan():
    model = bag_of_words(2)
    batch = batch_with_scores((7, 1))
    table = batch["scores"][:, None, :].expand(-1, 2, -1)
    tau = kendall_tau(model, batch["input_ids"], table, None, batch["attention_mask"])
    assert tau[0].item() == pytest.approx(1.0)
    assert torch.isnan(tau[1])


def test_wrong_shapes_are_clear():
    model = bag_of_words(2)
    batch = batch_with_scores((7, 4))
    with pytest.raises(ValueError, match=r"\[batch, classes, pos\]"):
        kendall_tau(
            model, batch["input_ids"], batch["scores"], None, batch["attention_mask"]
        )
    with pytest.raises(ValueError, match="one score per token"):
        kendall_tau(
            model,
            batch["input_ids"],
            lambda t: batch["scores"][:, :3],
            None,
            batch["attention_mask"],
        )
    with pytest.raises(ValueError, match="other must be one of"):
        KendallProtocol(other="some")
