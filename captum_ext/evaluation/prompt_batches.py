#!/usr/bin/env python3
r"""A causal LM's data as token ids and batches: the prompts (and the given
continuations) encoded and checked once, before any work
(:func:`encode_prompts`), then cut into length-bucketed batches of left-padded
prompts with their given or greedily generated continuations
(:func:`prompt_batches`). The generation benchmark
(:mod:`captum_ext.evaluation.engine.causal_lm`) and dataset attribution
(:mod:`captum_ext.evaluation.attribute`) both read their prompts through it."""

from dataclasses import dataclass
from typing import Any, Iterator, List, NamedTuple, Optional, Sequence

import torch
from torch import nn, Tensor

from captum_ext._utils.positive_int import check_positive_int
from captum_ext.attr._utils.continuations import (
    generate_continuations,
    left_padded,
    prompt_pad_id,
)
from captum_ext.defaults.batching import length_sorted_batches
from captum_ext.evaluation.options import continuation_gen_args, DEFAULT_MAX_NEW_TOKENS
from captum_ext.evaluation.user_data import DataError, LoadedExamples

__all__ = ["EncodedPrompts", "PromptBatch", "encode_prompts", "prompt_batches"]


class EncodedPrompts(NamedTuple):
    r"""The data's prompts and continuations as token ids."""

    prompts: List[List[int]]
    given: Optional[List[List[int]]]  # None: generated greedily
    max_new_tokens: Optional[int]  # None for given continuations


@dataclass
class PromptBatch:
    r"""One batch of prompts and the continuations every method explains."""

    rows: List[int]  # positions in the encoded prompts
    prompts: List[Tensor]  # each row's own prompt ids [P_b]
    input_ids: Tensor  # [batch, P], left-padded
    attention_mask: Tensor  # [batch, P]
    continuations: List[Tensor]  # each row's continuation ids [T_b]


def prompt_batches(
    model: nn.Module,
    tokenizer: Any,
    encoded: EncodedPrompts,
    rows: Sequence[int],
    batch_size: int,
    device: torch.device,
) -> Iterator[PromptBatch]:
    r"""``rows`` of ``encoded`` in batches of similar length (prompt and given
    continuation); when none are given, each batch's greedy continuations are
    generated as the batch is reached."""
    given = encoded.given

    def length(row: int) -> int:
        return len(encoded.prompts[row]) + (0 if given is None else len(given[row]))

    pad_id = prompt_pad_id(tokenizer)
    for chunk in length_sorted_batches(rows, length, batch_size):
        prompts = [torch.tensor(encoded.prompts[row]) for row in chunk]
        ids, mask = left_padded(prompts, pad_id, device)
        if given is None:
            args = continuation_gen_args(encoded.max_new_tokens)
            continuations = generate_continuations(model, tokenizer, ids, mask, args)
        else:
            continuations = [torch.tensor(given[row]) for row in chunk]
        yield PromptBatch(chunk, prompts, ids, mask, continuations)


def encode_prompts(
    tokenizer: Any, data: LoadedExamples, max_length: int, max_new_tokens: Optional[int]
) -> EncodedPrompts:
    r"""Token ids of the prompts (with the tokenizer's special tokens, BOS
    where it adds one) and of the given continuations (none added: no BOS
    inside a continuation), and the tokens to generate (None for given
    continuations; ``max_new_tokens``, by default 25, otherwise).
    ``ValueError`` for ``max_new_tokens`` with given continuations;
    :class:`DataError` naming the rows whose prompt and continuation (or
    ``max_new_tokens``) exceed ``max_length``."""
    if data.continuations is not None and max_new_tokens is not None:
        raise ValueError(
            "max_new_tokens applies when the model generates the continuations; "
            "these are given (drop --max-new-tokens or --target-column)"
        )
    if max_new_tokens is not None:
        check_positive_int(max_new_tokens, "max_new_tokens")
    if data.continuations is None:
        max_new_tokens = max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    prompts = list(tokenizer(list(data.texts), verbose=False)["input_ids"])
    given = None
    if data.continuations is not None:
        encoded = tokenizer(
            list(data.continuations), add_special_tokens=False, verbose=False
        )
        given = list(encoded["input_ids"])
    lengths = [
        len(prompt) + (max_new_tokens or 0) + (0 if given is None else len(given[i]))
        for i, prompt in enumerate(prompts)
    ]
    too_long = [data.rows[i] for i, n in enumerate(lengths) if n > max_length]
    if too_long:
        shown = ", ".join(map(str, too_long[:10]))
        more = f" and {len(too_long) - 10} more" if len(too_long) > 10 else ""
        raise DataError(
            f"{data.source}: the prompt and continuation of row(s) {shown}{more} "
            f"take more than max_length={max_length} tokens; shorten them, raise "
            "--max-length (up to the model's positions) or lower --max-new-tokens"
        )
    empty = [data.rows[i] for i, ids in enumerate(given or []) if not ids]
    if empty:
        raise DataError(
            f"{data.source}: the continuation of row(s) {empty[:10]} has no token"
        )
    return EncodedPrompts(prompts, given, max_new_tokens)
