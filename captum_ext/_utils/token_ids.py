#!/usr/bin/env python3
r"""The token batch and the model-independent checks of token inputs, shared by
all methods and metrics.

Call convention (the one every method and metric of token ids follows)::

    method.attribute(input_ids, target=None,
                     additional_forward_args=(attention_mask,))
    # or (attention_mask, token_type_ids), or a bare attention_mask, or None

``input_ids`` is ``[batch, pos]`` of token ids; ``attention_mask`` is 1 on real
tokens and 0 on padding. Metrics take the two through :func:`parse_token_ids`.
"""

import warnings
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Optional, Tuple, Type, TypeVar

import torch
from torch import Tensor

__all__ = [
    "TokenBatch",
    "check_same_shape",
    "on_device",
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
                "inputs must be one tensor of token ids, got a tuple "
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
