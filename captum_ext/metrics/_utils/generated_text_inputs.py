#!/usr/bin/env python3
r"""A call of a faithfulness metric of generated text, parsed: the prompt batch,
its continuation and the attributions, as rows of rankings (the teacher-forced
runs are in ``teacher_forced_runner.py``, the curves in ``hard_curves.py`` and
``soft_erasure.py``).

**Rows.** Attributions ``[batch, T, P]`` give one ranking of the prompt per
target token: row ``(b, t)`` perturbs prompt ``b`` by ranking ``t`` and reads
:math:`\log p(y_t \mid \tilde x, y_{<t})` (the continuation is cut after
:math:`y_t`: later steps cannot change it). Attributions ``[batch, P]`` (a
sequence-level explanation, e.g. Captum's ``seq_attr``) give one ranking per
prompt: one perturbed prompt per level, read at every target. Either way the
metric has one value per target token, ``[batch, T]``.
"""

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from captum_ext._utils.teacher_forcing import IGNORE_INDEX, teacher_forced_batch
from captum_ext.metrics._utils.inputs import (
    MetricCall,
    parse_inputs,
    TokenInputs,
    TokenOptions,
)

__all__ = ["GenerationCall", "GenerationInputs", "parse_generation"]


class GenerationCall(NamedTuple):
    r"""The keyword-only options every generation metric shares."""

    tokens: Optional[TokenOptions]
    internal_batch_size: Optional[int]
    show_progress: bool


@dataclass
class GenerationInputs:
    r"""A parsed call: the prompts (as rows of rankings), the continuation and
    the rankings' scores."""

    prompts: TokenInputs  # [batch, P], left-padded
    target: Tensor  # [batch, T], IGNORE_INDEX-padded
    scores: Tensor  # [batch, R, P] float64; R = T (per target) or 1 (shared)
    pad_token_id: int
    vocab_size: int
    rows: TokenInputs = field(init=False)  # [batch * R, P]: one per ranking

    def __post_init__(self) -> None:
        repeats = self.scores.shape[1]
        prompts = self.prompts

        def repeat(t: Tensor) -> Tensor:
            return t.repeat_interleave(repeats, 0)

        self.rows = TokenInputs(
            repeat(prompts.input_ids),
            repeat(prompts.attention_mask),
            (),
            special=repeat(prompts.special),
            prompts_of_causal_lm=True,
        )

    @property
    def n_rankings(self) -> int:
        return self.scores.shape[1]

    def row_targets(self, rows: Tensor) -> Tensor:
        r"""``[rows, T]``: the continuation each ranking row reads (per target:
        cut after its own target)."""
        examples = rows // self.n_rankings
        target = self.target[examples]
        if self.n_rankings == 1:
            return target
        steps = torch.arange(target.shape[1], device=target.device)
        after = steps[None, :] > (rows % self.n_rankings)[:, None]
        return target.masked_fill(after, IGNORE_INDEX)

    def row_has_target(self) -> Tensor:
        r"""``[batch * R]``: the ranking row has a target to read."""
        if self.n_rankings == 1:
            return torch.ones_like(self.target[:, 0], dtype=torch.bool)
        return (self.target != IGNORE_INDEX).flatten()

    def read(
        self, rows: Tensor, log_probs: Tensor
    ) -> Tuple[Tuple[Tensor, Tensor], Tensor]:
        r"""Where the rows' log-probabilities ``[rows, T']`` go in a
        ``[batch, T]`` table: ``(examples, steps)`` indices and the values."""
        examples = rows // self.n_rankings
        if self.n_rankings == 1:
            width = log_probs.shape[1]
            steps = torch.arange(width, device=rows.device).expand(len(rows), -1)
            return (examples[:, None].expand(-1, width), steps), log_probs
        steps = rows % self.n_rankings
        picked = log_probs.gather(1, steps[:, None])[:, 0]
        return (examples, steps), picked


def parse_generation(
    call: MetricCall, tokens: Optional[TokenOptions], vocab_size: int
) -> GenerationInputs:
    r"""Checks prompts, continuation and attributions (see the module docstring)."""
    tokens = tokens or TokenOptions()
    prompts = parse_inputs(call.inputs, call.additional_forward_args, tokens)
    if prompts.extra_args:
        raise ValueError(
            "the generation metrics take additional_forward_args=(attention_mask,) "
            f"only; got {len(prompts.extra_args) + 1} items"
        )
    pad = 0 if tokens.pad_token_id is None else tokens.pad_token_id
    # Checks the target and the left padding once, with teacher forcing's messages.
    joined = teacher_forced_batch(
        prompts.input_ids, prompts.attention_mask, call.target, pad, vocab_size
    )
    scores = _check_scores(call.attributions, prompts, joined.target.shape[1])
    return GenerationInputs(prompts, joined.target, scores, pad, vocab_size)


def _check_scores(attributions: Any, prompts: TokenInputs, steps: int) -> Tensor:
    if isinstance(attributions, tuple) and len(attributions) != 1:
        raise ValueError(
            "attributions as a tuple must hold one tensor (Captum's form of one "
            f"input), got {len(attributions)}"
        )
    scores = attributions[0] if isinstance(attributions, tuple) else attributions
    batch, width = prompts.input_ids.shape
    if not isinstance(scores, Tensor):
        raise TypeError(f"attributions must be a tensor, got {type(scores)}")
    given = tuple(scores.shape)
    if scores.dim() == 2:
        scores = scores[:, None]
    if tuple(scores.shape) != (batch, scores.shape[1], width) or scores.shape[
        1
    ] not in (
        1,
        steps,
    ):
        hint = (
            "; attributions with attribute_generated=True cover the continuation "
            f"too: pass attributions[..., :{width}]"
            if scores.dim() == 3 and scores.shape[-1] == width + steps
            else ""
        )
        raise ValueError(
            f"attributions must be [batch, T, P] = {(batch, steps, width)} (one row "
            f"per target token) or [batch, P] = {(batch, width)}, got "
            f"{given}{hint}"
        )
    scores = scores.detach().to(prompts.input_ids.device).double()
    valid = prompts.valid[:, None].expand_as(scores)
    if not bool(torch.isfinite(scores[valid]).all()):
        raise ValueError("attributions hold NaN or infinite scores at prompt tokens")
    return scores
