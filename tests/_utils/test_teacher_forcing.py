#!/usr/bin/env python3
import pytest
import torch
from captum_ext._utils.teacher_forcing import IGNORE_INDEX, teacher_forced_batch

from tests.helpers import continuation_batch, PAD_ID, tiny_causal_lm


def _joined(inputs):
    return teacher_forced_batch(
        inputs["input_ids"], inputs["attention_mask"], inputs["target"], PAD_ID, 99
    )


def _naive_log_probs(model, prompt, continuation):
    r"""log p(y_t | prompt, y_<t), one unpadded example, one forward per step."""
    scores = []
    for t, token in enumerate(continuation.tolist()):
        ids = torch.cat([prompt, continuation[:t]])[None]
        logits = model(input_ids=ids).logits[0, -1].double()
        scores.append(logits.log_softmax(-1)[token])
    return torch.stack(scores)


# Llama in float64 puts NaN on left-padded rows (transformers' eager mask: a
# padding query attends to nothing), so its exact check runs in float32.
@pytest.mark.parametrize(
    "family, dtype, tolerance",
    [("gpt2", torch.float64, 1e-10), ("llama", torch.float32, 1e-5)],
)
def test_log_probs_equal_one_step_at_a_time(family, dtype, tolerance) -> None:
    model = tiny_causal_lm(family, dtype=dtype)
    inputs = continuation_batch()
    batch = _joined(inputs)
    ids, mask = batch.model_inputs()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    got = batch.target_log_probs(logits)
    for row in range(len(ids)):
        prompt = inputs["input_ids"][row][inputs["attention_mask"][row].bool()]
        steps = inputs["target"][row][inputs["target"][row] != IGNORE_INDEX]
        expected = _naive_log_probs(model, prompt, steps)
        torch.testing.assert_close(
            got[row, : len(steps)].double(), expected, rtol=0, atol=tolerance
        )
        assert bool((got[row, len(steps) :] == 0).all())


def test_contrast_is_a_difference_of_log_probs() -> None:
    batch = _joined(continuation_batch())
    logits = torch.randn(3, batch.prompt_len + batch.n_targets - 1, 99)
    foil = torch.full_like(batch.target, 7)
    foil_alone = _joined(dict(continuation_batch(), target=foil))
    contrast = batch.target_log_probs(logits, contrast=foil)
    difference = batch.target_log_probs(logits) - foil_alone.target_log_probs(logits)
    torch.testing.assert_close(contrast, difference * batch.target_mask)


def test_score_mask_prompt_and_earlier_generated_tokens() -> None:
    batch = _joined(continuation_batch(prompt_lengths=(2, 4), target_lengths=(3, 1)))
    prompt_only = batch.score_mask()
    assert prompt_only.shape == (2, 3, 4)
    assert prompt_only[0].tolist() == [[False, False, True, True]] * 3
    assert prompt_only[1].tolist() == [[True] * 4, [False] * 4, [False] * 4]
    generated = batch.score_mask(attribute_generated=True)
    assert generated.shape == (2, 3, 7)
    # Row t of example 0 sees the prompt and y_<t, never y_t itself or later.
    assert generated[0, :, 4:].tolist() == [
        [False, False, False],
        [True, False, False],
        [True, True, False],
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(target=torch.tensor([[5, IGNORE_INDEX, 6]] * 3)), "right"),
        (dict(target=torch.tensor([[IGNORE_INDEX]] * 3)), "no target"),
        (dict(target=torch.tensor([[120]] * 3)), r"\[0, 99\)"),
        (dict(target=torch.tensor([5, 6, 7])), r"\[batch, T\]"),
        (dict(target=torch.ones(3, 2)), "integer"),
        (dict(target=torch.ones(2, 2, dtype=torch.long)), "one row per prompt"),
    ],
)
def test_bad_targets(change, message) -> None:
    with pytest.raises(ValueError, match=message):
        _joined(dict(continuation_batch(), **change))


def test_right_padded_prompt_is_refused() -> None:
    inputs = continuation_batch()
    inputs["attention_mask"] = inputs["attention_mask"].flip(-1)
    with pytest.raises(ValueError, match="padded on the right"):
        _joined(inputs)
