#!/usr/bin/env python3
r"""The one token-input core: the token batch, its parsing and its checks (one
message per error), shared by all methods and metrics.

Call convention (the one every captum_ext method and metric follows)::

    method.attribute(input_ids, target=None,
                     additional_forward_args=(attention_mask,))
    # or (attention_mask, token_type_ids), or a bare attention_mask, or None

``input_ids`` is ``[batch, pos]`` of token ids; ``attention_mask`` is 1 on real
tokens and 0 on padding: right or left for a decoder-only model, right for an
encoder (it reads its prediction from position 0). Metrics take the same two
through :func:`parse_token_ids` (they have no model adapter); methods through
:func:`parse_token_batch`, which adds the checks that need the model.
"""

import warnings
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Optional, Tuple, Type, TypeVar

import torch
from torch import Tensor

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


_Batch = TypeVar("_Batch", bound="TokenBatch")


@dataclass
class TokenBatch:
    r"""A batch of token ids and what the forward pass takes after them: the
    one record from the tokenizer's output to the methods, the metrics and the
    evaluation engine.

    Args:
        input_ids (Tensor): ``[batch, pos]`` token ids.
        attention_mask (Tensor): ``[batch, pos]``, 1 on real tokens.
        extra_args (tuple, optional): the forward function's arguments after
            the mask; for a Hugging Face model ``(token_type_ids,)`` of a text
            pair, else empty.
    """

    input_ids: Tensor
    attention_mask: Tensor
    extra_args: Tuple[Any, ...] = ()

    @classmethod
    def of(
        cls: Type[_Batch],
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Optional[Tensor] = None,
        **fields: Any,
    ) -> _Batch:
        r"""The batch of a tokenizer's output (``token_type_ids`` for text pairs
        only); ``fields`` are a subclass's own."""
        extra = () if token_type_ids is None else (token_type_ids,)
        return cls(input_ids, attention_mask, extra, **fields)

    @property
    def token_type_ids(self) -> Optional[Tensor]:
        r"""``[batch, pos]`` segment ids of a text pair, else None."""
        return self.extra_args[0] if self.extra_args else None

    @cached_property  # read by every chunk of every method and metric
    def valid(self) -> Tensor:
        r"""Boolean ``[batch, pos]``: True on real (non-pad) tokens."""
        return self.attention_mask.bool()

    def forward_args(self) -> Tuple[Any, ...]:
        r"""``additional_forward_args`` of a Captum call on these ids:
        ``(attention_mask,)`` or ``(attention_mask, token_type_ids)``."""
        return (self.attention_mask, *self.extra_args)

    def select(self: _Batch, rows: Any) -> _Batch:
        r"""The batch of ``rows`` (a slice or index tensor) of every tensor."""
        return replace(
            self,
            input_ids=self.input_ids[rows],
            attention_mask=self.attention_mask[rows],
            extra_args=tuple(_rows_of(arg, rows) for arg in self.extra_args),
        )

    def to(self: _Batch, device: Any) -> _Batch:
        r"""The batch with every tensor on ``device``."""
        return replace(
            self,
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            extra_args=tuple(on_device(arg, device) for arg in self.extra_args),
        )


def _rows_of(arg: Any, rows: Any) -> Any:
    return arg[rows] if isinstance(arg, Tensor) else arg


def on_device(arg: Any, device: Any) -> Any:
    r"""``arg`` on ``device`` if it is a tensor; anything else as it is."""
    return arg.to(device) if isinstance(arg, Tensor) else arg


def parse_token_ids(
    inputs: Any, additional_forward_args: Any = None, pad_token_id: Optional[int] = None
) -> Tuple[Tensor, Tensor, Tuple[Any, ...]]:
    r"""The model-independent half of the input checks, shared by methods and
    metrics: ``inputs`` as integer ids ``[batch, pos]``, the attention mask (all
    ones when None) and the items of ``additional_forward_args`` after the mask.

    Raises on a non-integer or non-2D input, an empty batch or sequence, a mask of
    another shape or with values other than 0 and 1, and an example with no
    attended token. Warns (once) when ``inputs`` hold ``pad_token_id`` but no mask
    was given: the padding would be read as text.
    """
    input_ids = _as_token_ids(inputs)
    if input_ids.numel() == 0:
        raise ValueError(f"empty input: inputs has shape {tuple(input_ids.shape)}")
    extras = _extra_args(additional_forward_args)
    attention_mask = extras[0] if extras else None
    if attention_mask is None:
        _warn_if_padded(input_ids, pad_token_id)
        attention_mask = torch.ones_like(input_ids)
    check_same_shape("attention_mask", attention_mask, input_ids)
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (tokens)")
    empty = (~attention_mask.bool().any(-1)).nonzero().flatten()
    if len(empty):
        raise ValueError(
            f"empty input: example(s) {empty.tolist()} have no attended token "
            "(attention_mask is all zero)"
        )
    return input_ids, attention_mask, extras[1:]


def _as_token_ids(inputs: Any) -> Tensor:
    if isinstance(inputs, tuple):
        if len(inputs) != 1:
            raise ValueError(
                f"captum_ext takes one input tensor of token ids, got a tuple "
                f"of {len(inputs)}; pass masks through additional_forward_args"
            )
        inputs = inputs[0]
    if not isinstance(inputs, Tensor):
        raise TypeError(f"inputs must be a tensor of token ids, got {type(inputs)}")
    if inputs.dtype.is_floating_point or inputs.dtype == torch.bool:
        raise TypeError(
            f"inputs must be integer token ids [batch, pos], got dtype {inputs.dtype}"
        )
    if inputs.dim() != 2:
        hint = "; add a batch dimension with .unsqueeze(0)" if inputs.dim() == 1 else ""
        raise ValueError(
            "inputs must be token ids of shape [batch, pos], got "
            f"{tuple(inputs.shape)}{hint}"
        )
    return inputs


def _extra_args(additional_forward_args: Any) -> Tuple[Any, ...]:
    if additional_forward_args is None:
        return ()
    if isinstance(additional_forward_args, Tensor):
        return (additional_forward_args,)
    if isinstance(additional_forward_args, (tuple, list)):
        return tuple(additional_forward_args)
    raise TypeError(
        "additional_forward_args must be None, an attention mask, or a tuple "
        f"(attention_mask, ...); got {type(additional_forward_args)}"
    )


def check_same_shape(name: str, tensor: Any, input_ids: Tensor) -> None:
    r"""Raises unless ``tensor`` is a tensor of the shape of ``input_ids``."""
    if not isinstance(tensor, Tensor) or tensor.shape != input_ids.shape:
        got = tuple(tensor.shape) if isinstance(tensor, Tensor) else type(tensor)
        raise ValueError(
            f"{name} has shape {got} but inputs has {tuple(input_ids.shape)}; "
            "it must be a tensor of the shape of inputs"
        )


def _warn_if_padded(input_ids: Tensor, pad_token_id: Optional[int]) -> None:
    if pad_token_id is None:
        return
    rows = (input_ids == pad_token_id).any(-1).nonzero().flatten().tolist()
    if rows:
        warnings.warn(
            f"example(s) {rows} hold the padding id {pad_token_id} but no "
            "attention_mask was given, so the padding is read as text; pass "
            "additional_forward_args=(attention_mask,)",
            UserWarning,
            stacklevel=3,
        )


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
