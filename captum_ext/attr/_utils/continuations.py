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
from captum_ext._utils.token_batch import (
    check_tokenizer_vocabulary,
    check_vocabulary_ids,
)
from captum_ext.adapters import get_adapter, ModelAdapter

__all__ = [
    "generate_continuations",
    "generation_args",
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
    (left-padded), by ``model.generate`` with ``gen_args``
    (:func:`generation_args`), each ending at its first EOS
    (included); ``model`` is a Hugging Face model with ``generate``.
    ``ValueError`` when a prompt gets no token."""
    args = generation_args(model, tokenizer, input_ids, gen_args)
    with eval_semantics(model), torch.no_grad():
        output = model.generate(
            input_ids=input_ids, attention_mask=attention_mask, **args
        )
    if not isinstance(output, Tensor):  # return_dict_in_generate=True
        output = output.sequences
    eos = torch.tensor(_eos_ids(model, tokenizer, args), device=output.device)
    continuations = []
    for row in output[:, input_ids.shape[1] :]:
        ends = torch.isin(row, eos).nonzero().flatten()
        length = int(ends[0]) + 1 if len(ends) else len(row)
        continuations.append(row[:length])
    if any(len(c) == 0 for c in continuations):
        raise ValueError("generation produced no token; raise max_new_tokens")
    return continuations


def generation_args(
    model: Any, tokenizer: Any, input_ids: Tensor, gen_args: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    r"""The keywords of ``model.generate``: ``gen_args``, or Captum's defaults
    (greedy, ``max_new_tokens=25``) when it is None or empty, and the
    tokenizer's pad id unless given; checked before anything is generated, so
    a bad input is one clear error instead of an ``IndexError`` deep inside
    ``generate()``. Raises
    ``ValueError`` when the tokenizer has more tokens than the model's
    vocabulary, a prompt id ``[batch, P]`` lies outside it, the prompt and the
    tokens to generate exceed the model's positions, or ``gen_args`` asks for
    several continuations per prompt (``num_return_sequences`` > 1, beam
    search included)."""
    if gen_args is not None and not isinstance(gen_args, dict):
        raise TypeError(
            "gen_args must be a dict of model.generate keywords, got "
            f"{type(gen_args).__name__}"
        )
    # Captum's rule: its defaults only when gen_args is not given (None or
    # empty); given, they are model.generate's keywords as they are.
    args = dict(gen_args or DEFAULT_GEN_ARGS)
    args.setdefault("pad_token_id", prompt_pad_id(tokenizer))
    adapter = get_adapter(model)
    check_tokenizer_vocabulary(adapter, tokenizer)
    check_vocabulary_ids(adapter, input_ids, "prompt token ids")
    config = model.generation_config
    sequences = args.get("num_return_sequences") or config.num_return_sequences or 1
    if sequences != 1:
        raise ValueError(
            f"gen_args num_return_sequences={sequences} returns {sequences} "
            "continuations per prompt, but one prompt is explained with one "
            "continuation; generate them yourself and pass each as target"
        )
    _check_generation_positions(adapter, input_ids.shape[1], args, config)
    return args


def _check_generation_positions(
    adapter: ModelAdapter, prompt_len: int, args: Dict[str, Any], config: Any
) -> None:
    limit = adapter.max_positions
    new_tokens = args.get("max_new_tokens")
    if new_tokens is not None:
        if not isinstance(new_tokens, int) or new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {new_tokens!r}")
        total, what = prompt_len + new_tokens, f"+ max_new_tokens ({new_tokens})"
    else:
        total = args.get("max_length") or config.max_length
        if total is None:
            return  # transformers' default: 20 new tokens, capped to the positions
        what = f"up to max_length ({total})"
    if limit is not None and total > limit:
        raise ValueError(
            f"the prompt ({prompt_len} tokens) {what} need {total} positions but "
            f"the model has only {limit}; shorten the prompt or generate fewer "
            "tokens"
        )


def _eos_ids(model: Any, tokenizer: Any, gen_args: Dict[str, Any]) -> List[int]:
    eos = gen_args.get("eos_token_id")
    if eos is None:
        eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    return [] if eos is None else [int(e) for e in torch.as_tensor(eos).flatten()]
