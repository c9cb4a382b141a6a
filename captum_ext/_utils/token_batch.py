#!/usr/bin/env python3
r"""The checks of token inputs that need the model (its vocabulary, positions,
special tokens and padding side), on top of :mod:`captum_ext._utils.token_ids`.

Methods take ``input_ids`` and ``attention_mask`` (1 on real tokens and 0 on
padding: right or left for a decoder-only model, right for an encoder, which
reads its prediction from position 0) through :func:`parse_token_batch`.
"""

from typing import Any

from torch import Tensor

from captum_ext._utils.token_ids import (
    check_same_shape,
    on_device,
    parse_token_ids,
    TokenBatch,
)
from captum_ext.adapters import ModelAdapter

__all__ = [
    "TokenBatch",
    "check_same_shape",
    "check_tokenizer_vocabulary",
    "check_vocabulary_ids",
    "on_device",
    "parse_token_batch",
    "parse_token_ids",
]


def parse_token_batch(
    adapter: ModelAdapter, inputs: Any, additional_forward_args: Any = None
) -> TokenBatch:
    r"""Validates ``inputs`` and ``additional_forward_args`` into a :class:`TokenBatch`.

    Adds to :func:`parse_token_ids` the checks that need the model: an example
    made only of special tokens, a token id outside the vocabulary, an input
    longer than the model's positions, and left padding on an encoder (which reads
    its prediction from position 0).
    """
    input_ids, attention_mask, rest = parse_token_ids(
        inputs, additional_forward_args, adapter.tokens.pad_token_id
    )
    if len(rest) > 1:
        raise ValueError(
            "additional_forward_args is (attention_mask,) or "
            f"(attention_mask, token_type_ids); got {len(rest) + 1} items"
        )
    token_type_ids = rest[0] if rest else None
    if token_type_ids is not None:
        check_same_shape("token_type_ids", token_type_ids, input_ids)
    batch = TokenBatch.of(input_ids, attention_mask, token_type_ids)
    _check_not_only_special(adapter, batch)
    check_vocabulary_ids(adapter, input_ids)
    _check_positions(adapter, batch)
    return batch


def check_vocabulary_ids(
    adapter: ModelAdapter, input_ids: Tensor, what: str = "token ids"
) -> None:
    r"""Raises unless every id of ``input_ids`` indexes the model's vocabulary
    (``what`` names them in the message)."""
    vocab_size = adapter.word_embeddings().num_embeddings
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{what} must be in [0, {vocab_size}) for this model's vocabulary, "
            f"got ids from {low} to {high}; use the model's own tokenizer"
        )


def check_tokenizer_vocabulary(adapter: ModelAdapter, tokenizer: Any) -> None:
    r"""Raises unless every id ``tokenizer`` can produce (``len(tokenizer)``,
    added tokens included) indexes the model's word embeddings: a larger
    tokenizer belongs to another model, and its extra ids would index past the
    embeddings (or, on a GPU, read whatever lies there)."""
    vocab_size = adapter.word_embeddings().num_embeddings
    size = len(tokenizer)
    if size > vocab_size:
        raise ValueError(
            f"the tokenizer has {size} tokens but the model's vocabulary only "
            f"{vocab_size}; use the model's own tokenizer (after adding tokens, "
            "model.resize_token_embeddings(len(tokenizer)))"
        )


def _check_not_only_special(adapter: ModelAdapter, batch: TokenBatch) -> None:
    special = adapter.tokens.special_positions(batch.input_ids, batch.attention_mask)
    only_special = (~(batch.valid & ~special).any(-1)).nonzero().flatten()
    if len(only_special):
        raise ValueError(
            f"empty input: example(s) {only_special.tolist()} hold only special "
            "tokens; there is nothing to attribute"
        )


def _check_positions(adapter: ModelAdapter, batch: TokenBatch) -> None:
    pos = batch.input_ids.shape[1]
    max_positions = adapter.max_positions
    if max_positions is not None and pos > max_positions:
        raise ValueError(
            f"input has {pos} positions but the model has only {max_positions} "
            "position embeddings; truncate it (tokenizer(..., truncation=True))"
        )
    left_padded = (~batch.valid[:, 0]).nonzero().flatten()
    # A decoder reads its last token wherever it is; an encoder reads position 0.
    if not adapter.is_causal and len(left_padded):
        raise ValueError(
            f"example(s) {left_padded.tolist()} are padded on the left, but "
            f"{type(adapter.model).__name__} reads its prediction from position 0, "
            "which would be padding; pad on the right "
            '(tokenizer.padding_side = "right")'
        )
