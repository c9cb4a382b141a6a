#!/usr/bin/env python3
r"""Parsing of the Captum-style metric arguments into one validated structure.

Every metric takes ``inputs`` (token ids ``[batch, pos]``) and
``additional_forward_args`` whose first item is the attention mask (1 on real
tokens, 0 on padding, left or right); any further items (``token_type_ids``, ...)
are passed on to ``forward_func`` unchanged.
"""

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Tuple

import torch
from captum._utils.common import (
    _format_additional_forward_args,
    _format_tensor_into_tuples,
)
from torch import Tensor

from captum_ext._utils.common import _as_tensor_input

__all__ = ["TokenInputs", "check_attributions", "check_evidence", "parse_inputs"]


@dataclass
class TokenInputs:
    r"""Token ids, their masks and the remaining forward arguments.

    ``valid`` marks real (non-pad) tokens; ``special`` marks the real tokens that
    are never perturbed, ranked or counted (special tokens, plus any position the
    caller excludes through ``special_tokens_mask``).
    """

    input_ids: Tensor
    attention_mask: Tensor
    extra_args: Tuple[Any, ...]
    valid: Tensor
    special: Tensor

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]

    @property
    def content(self) -> Tensor:
        r"""Boolean ``[batch, pos]``: real tokens that are not special."""
        return self.valid & ~self.special

    @property
    def left_padded(self) -> Tensor:
        r"""Boolean ``[batch]``: rows padded on the left. Rows without padding
        follow the batch: left when every padded row is padded on the left."""
        first, last = self.valid[:, 0], self.valid[:, -1]
        left, right = ~first & last, first & ~last
        batch_left = bool(left.any()) and not bool(right.any())
        return left | (first & last & batch_left)

    def forward_args(self) -> Tuple[Any, ...]:
        return (self.attention_mask, *self.extra_args)


def parse_inputs(
    inputs: Any,
    additional_forward_args: Any = None,
    special_tokens_mask: Optional[Tensor] = None,
    special_token_ids: Optional[Iterable[int]] = None,
) -> TokenInputs:
    r"""Validates the arguments shared by all metrics (see the module docstring).

    Special positions are the union of ``special_tokens_mask`` (1 = special, as
    returned by ``tokenizer(..., return_special_tokens_mask=True)``) and the
    positions holding one of ``special_token_ids``; without either, no position is
    special.
    """
    input_ids = _as_tensor_input(_single_input(inputs))
    args = _format_additional_forward_args(additional_forward_args) or (None,)
    attention_mask = args[0]
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    _check_same_shape("attention_mask", attention_mask, input_ids)
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (tokens)")
    valid = attention_mask.bool()
    empty = (~valid.any(1)).nonzero().flatten()
    if len(empty):
        raise ValueError(
            f"example(s) {empty.tolist()} have no real token (attention_mask is 0)"
        )
    special = _special_positions(input_ids, special_tokens_mask, special_token_ids)
    return TokenInputs(
        input_ids, attention_mask, tuple(args[1:]), valid, special & valid
    )


def _single_input(inputs: Any) -> Any:
    if isinstance(inputs, tuple):
        formatted = _format_tensor_into_tuples(inputs)
        if len(formatted) != 1:
            raise ValueError(
                "metrics take one input tensor of token ids, got a tuple of "
                f"{len(formatted)}; pass masks through additional_forward_args"
            )
        return formatted[0]
    return inputs


def _special_positions(
    input_ids: Tensor,
    special_tokens_mask: Optional[Tensor],
    special_token_ids: Optional[Iterable[int]],
) -> Tensor:
    special = torch.zeros_like(input_ids, dtype=torch.bool)
    if special_tokens_mask is not None:
        _check_same_shape("special_tokens_mask", special_tokens_mask, input_ids)
        special |= special_tokens_mask.to(input_ids.device).bool()
    if special_token_ids is not None:
        ids = torch.as_tensor(list(special_token_ids), device=input_ids.device)
        special |= torch.isin(input_ids, ids.to(input_ids.dtype))
    return special


def _check_same_shape(name: str, tensor: Any, input_ids: Tensor) -> None:
    if not isinstance(tensor, Tensor) or tensor.shape != input_ids.shape:
        shape = tuple(tensor.shape) if isinstance(tensor, Tensor) else type(tensor)
        raise ValueError(
            f"{name} must be a tensor of the shape of inputs "
            f"{tuple(input_ids.shape)}, got {shape}"
        )


def check_attributions(
    attributions: Any, inputs: TokenInputs, name: str = "attributions"
) -> Tensor:
    r"""Returns ``attributions`` as a float tensor ``[batch, pos]``.

    Raises on another shape (token attributions have one score per position; sum
    embedding-level attributions over their last dimension first) and on
    non-finite scores at real tokens.
    """
    scores = _single_input(attributions)
    if not isinstance(scores, Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(scores)}")
    expected = tuple(inputs.input_ids.shape)
    if tuple(scores.shape) != expected:
        hint = (
            "; these look like embedding-level attributions: sum them over the "
            "last dimension first (attributions.sum(-1))"
            if scores.dim() == 3 and tuple(scores.shape[:2]) == expected
            else ""
        )
        raise ValueError(
            f"{name} must have one score per token, shape {expected} like inputs, "
            f"got {tuple(scores.shape)}{hint}"
        )
    scores = scores.detach().to(inputs.input_ids.device).double()
    if not bool(torch.isfinite(scores[inputs.valid]).all()):
        raise ValueError(f"{name} hold NaN or infinite scores at real tokens")
    return scores


def check_evidence(evidence_mask: Any, inputs: TokenInputs) -> Tensor:
    r"""Returns the evidence mask ``[batch, pos]`` as booleans."""
    _check_same_shape("evidence_mask", evidence_mask, inputs.input_ids)
    return evidence_mask.to(inputs.input_ids.device).bool()
