#!/usr/bin/env python3
r"""Continuations a causal LM generates from a left-padded prompt batch, cut at
the first end-of-sequence token (included): what
:class:`~captum_ext.attr.LLMTokenAttribution` and ``captum-ext attribute``
explain when no continuation is given."""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from captum.attr._core.llm_attr import DEFAULT_GEN_ARGS
from torch import Tensor

from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.teacher_forcing import IGNORE_INDEX

__all__ = [
    "generate_continuations",
    "left_padded",
    "prompt_pad_id",
    "right_padded",
]


def prompt_pad_id(tokenizer: Any) -> int:
    r"""The id that pads prompts: the pad token, else the EOS token, else 0
    (padded positions are masked, so any id works)."""
    for token in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token is not None:
            return int(token)
    return 0


def left_padded(
    prompts: Sequence[Tensor], pad_id: int, device: torch.device
) -> Tuple[Tensor, Tensor]:
    r"""``(input_ids, attention_mask)`` ``[batch, P]`` of prompt ids ``[P_i]``,
    padded on the left (a causal LM continues from the last prompt token)."""
    width = max(len(prompt) for prompt in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = prompt
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


def right_padded(rows: Sequence[Tensor], device: torch.device) -> Tensor:
    r"""``[batch, T]`` continuation ids of rows ``[T_i]``, right-padded with
    :data:`~captum_ext._utils.teacher_forcing.IGNORE_INDEX`."""
    out = torch.full(
        (len(rows), max(len(row) for row in rows)), IGNORE_INDEX, dtype=torch.long
    )
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out.to(device)


def generate_continuations(
    model: Any,
    tokenizer: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    gen_args: Optional[Dict[str, Any]] = None,
) -> List[Tensor]:
    r"""One continuation ``[T_i]`` per prompt of ``input_ids`` ``[batch, P]``
    (left-padded), by ``model.generate`` with ``gen_args`` over Captum's
    defaults (greedy, ``max_new_tokens=25``), each ending at its first EOS
    (included); ``model`` is a Hugging Face model with ``generate``.
    ``ValueError`` when a prompt gets no token."""
    args = {**DEFAULT_GEN_ARGS, "pad_token_id": prompt_pad_id(tokenizer)}
    args.update(gen_args or {})
    with eval_semantics(model), torch.no_grad():
        output = model.generate(
            input_ids=input_ids, attention_mask=attention_mask, **args
        )
    eos = torch.tensor(_eos_ids(model, tokenizer, args), device=output.device)
    continuations = []
    for row in output[:, input_ids.shape[1] :]:
        ends = torch.isin(row, eos).nonzero().flatten()
        length = int(ends[0]) + 1 if len(ends) else len(row)
        continuations.append(row[:length])
    if any(len(c) == 0 for c in continuations):
        raise ValueError("generation produced no token; raise max_new_tokens")
    return continuations


def _eos_ids(model: Any, tokenizer: Any, gen_args: Dict[str, Any]) -> List[int]:
    eos = gen_args.get("eos_token_id")
    if eos is None:
        eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    return [] if eos is None else [int(e) for e in torch.as_tensor(eos).flatten()]
