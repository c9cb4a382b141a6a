#!/usr/bin/env python3
r"""How the engines call a registered method: the types of its ``explain``
functions and of the factories that build them, the wrappers that give a
method's scores that convention, and the filling of a batch of generated-text
scores example by example."""

from typing import Any, Callable, Optional

import torch
from torch import nn, Tensor

from captum_ext._utils.teacher_forcing import IGNORE_INDEX
from captum_ext._utils.token_batch import TokenBatch

__all__ = [
    "GenerationFactory",
    "GenerationFn",
    "GenerationScores",
    "MethodFactory",
    "MethodFn",
    "ScoreFn",
    "rows_of_examples",
]

# explain(input_ids, attention_mask, target, token_type_ids=None) -> [batch, pos]
MethodFn = Callable[..., Tensor]
# factory(model, tokenizer) -> explain; factory(model, tokenizer, decoder_texts)
# for a method that needs decoders.
MethodFactory = Callable[..., MethodFn]
# explain(prompt_ids [batch, P] left-padded, attention_mask [batch, P],
#         target_ids [batch, T] right-padded with -100) -> [batch, T, P]
GenerationFn = Callable[[Tensor, Tensor, Tensor], Tensor]
GenerationFactory = Callable[[nn.Module, Any], GenerationFn]

# scores(input_ids, target, forward_args) -> [batch, pos] (or [batch, layers, pos]);
# forward_args[0] is the attention mask.
ScoreFn = Callable[[Tensor, Tensor, tuple], Tensor]


def _explainer(scores: ScoreFn) -> MethodFn:
    r"""The engine's call convention, ``explain(input_ids, attention_mask, target,
    token_type_ids=None)``, around ``scores``; gradients are on whatever the
    caller's mode (gradient methods need them), and the scores come back
    detached."""

    def explain(
        input_ids: Tensor,
        attention_mask: Tensor,
        target: Tensor,
        token_type_ids: Optional[Tensor] = None,
    ) -> Tensor:
        args = TokenBatch.of(input_ids, attention_mask, token_type_ids).forward_args()
        with torch.enable_grad():
            return scores(input_ids, target, args).detach()

    return explain


GenerationScores = Callable[[Tensor, Tensor, Tensor], Tensor]


def _generation_explainer(model: nn.Module, scores: GenerationScores) -> GenerationFn:
    r"""``explain(prompt_ids, attention_mask, target_ids)`` around ``scores``:
    gradients on (gradient methods need them), scores detached, in float32
    (float64 for a float64 model)."""
    dtype = torch.promote_types(torch.float32, next(model.parameters()).dtype)

    def explain(prompt_ids: Tensor, attention_mask: Tensor, target_ids: Tensor):
        with torch.enable_grad():
            return scores(prompt_ids, attention_mask, target_ids).detach().to(dtype)

    return explain


def rows_of_examples(
    prompt_ids: Tensor, mask: Tensor, target_ids: Tensor, example_scores: Callable
) -> Tensor:
    r"""``[batch, T, P]`` filled example by example: ``example_scores(prompt
    [P_b], target [T_b]) -> [T_b, P_b]`` placed at the row's attended prompt
    positions and real target steps; zero elsewhere and for a row without
    targets."""
    out = torch.zeros(*target_ids.shape, prompt_ids.shape[1], dtype=torch.float64)
    for row in range(len(prompt_ids)):
        kept, steps = mask[row].bool(), target_ids[row] != IGNORE_INDEX
        if steps.any():
            values = example_scores(prompt_ids[row][kept], target_ids[row][steps])
            out[row, steps.nonzero(), kept.nonzero().T] = values.double().cpu()
    return out.to(prompt_ids.device)
