#!/usr/bin/env python3
r"""Parsing of the Captum-style metric arguments into one validated structure.

Every metric takes ``inputs`` (token ids ``[batch, pos]``) and
``additional_forward_args`` whose first item is the attention mask (1 on real
tokens, 0 on padding, left or right); any further items (``token_type_ids``, ...)
are passed on to ``forward_func`` unchanged.
"""

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

import torch
from captum._utils.typing import TargetType
from torch import Tensor

from captum_ext._utils.token_ids import check_same_shape, parse_token_ids, TokenBatch

__all__ = [
    "MetricCall",
    "MetricOptions",
    "TokenInputs",
    "TokenOptions",
    "check_attributions",
    "check_evidence",
    "parse_inputs",
]


@dataclass(frozen=True, eq=False)
class TokenOptions:
    r"""The tokenizer's ids a metric needs, in one record.

    Attributes:
        mask_token_id (int, optional): the [MASK] id; required by protocols with
            ``mode="mask"``.
        pad_token_id (int, optional): the [PAD] id; required by ``mode="pad"``,
            and fills the slots freed by ``mode="delete"`` (0 when None; give it
            for causal classifiers, which find their last token by it). Ids equal
            to it without an attention mask trigger a warning.
        special_token_ids (sequence of int, optional): ids that are never
            perturbed, ranked or counted wherever they occur (e.g.
            ``tokenizer.all_special_ids``).
        special_tokens_mask (Tensor, optional): ``[batch, pos]``, 1 on positions
            that are never perturbed, ranked or counted (as returned by
            ``tokenizer(..., return_special_tokens_mask=True)``, or any position
            to exclude); joined with ``special_token_ids``.

    Without ``special_token_ids`` and ``special_tokens_mask`` no position is
    special. Frozen; compared by identity, as it may hold a tensor.
    """

    mask_token_id: Optional[int] = None
    pad_token_id: Optional[int] = None
    special_token_ids: Optional[Sequence[int]] = None
    special_tokens_mask: Optional[Tensor] = None

    def __post_init__(self) -> None:
        if self.special_token_ids is not None:
            ids = tuple(int(i) for i in self.special_token_ids)
            object.__setattr__(self, "special_token_ids", ids)

    @classmethod
    def from_tokenizer(
        cls, tokenizer: Any, special_tokens_mask: Optional[Tensor] = None
    ) -> "TokenOptions":
        r"""The [MASK], [PAD] and special ids of a Hugging Face tokenizer."""
        return cls(
            mask_token_id=tokenizer.mask_token_id,
            pad_token_id=tokenizer.pad_token_id,
            special_token_ids=tuple(tokenizer.all_special_ids),
            special_tokens_mask=special_tokens_mask,
        )


class MetricCall(NamedTuple):
    r"""The Captum-style positional arguments of a metric, as given."""

    forward_func: Callable[..., Tensor]
    inputs: Any
    attributions: Any
    target: TargetType
    additional_forward_args: Any


class MetricOptions(NamedTuple):
    r"""The keyword-only options every model-running metric shares."""

    tokens: Optional["TokenOptions"]
    internal_batch_size: Optional[int]
    show_progress: bool


@dataclass(init=False)
class TokenInputs(TokenBatch):
    r"""A :class:`~captum_ext._utils.token_ids.TokenBatch` checked for a metric:
    ``extra_args`` are the forward function's arguments after the mask, passed
    on unchanged; ``special`` marks the real tokens that are never perturbed,
    ranked or counted (special tokens, plus any position the caller excludes
    through ``special_tokens_mask``).
    ``prompts_of_causal_lm``: every row is a causal LM's prompt, continued
    after its last column, so rows are re-packed on the left whatever their
    padding.
    """

    special: Tensor  # type: ignore[misc]  # __init__ written out below
    prompts_of_causal_lm: bool = False

    def __init__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        extra_args: Tuple[Any, ...] = (),
        *,
        special: Tensor,
        prompts_of_causal_lm: bool = False,
    ) -> None:
        # Written out: Python 3.9's dataclasses (Captum's floor) have no
        # kw_only, so a generated __init__ could not take the required
        # ``special`` after TokenBatch's defaulted ``extra_args``.
        super().__init__(input_ids, attention_mask, extra_args)
        self.special = special
        self.prompts_of_causal_lm = prompts_of_causal_lm

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]

    @property
    def content(self) -> Tensor:
        r"""Boolean ``[batch, pos]``: real tokens that are not special."""
        return self.valid & ~self.special

    @cached_property  # read by every chunk of every level
    def left_padded(self) -> Tensor:
        r"""Boolean ``[batch]``: rows padded on the left. Rows without padding
        follow the batch: left when every padded row is padded on the left."""
        if self.prompts_of_causal_lm:
            return torch.ones_like(self.valid[:, 0])
        first, last = self.valid[:, 0], self.valid[:, -1]
        left, right = ~first & last, first & ~last
        batch_left = bool(left.any()) and not bool(right.any())
        return left | (first & last & batch_left)


def parse_inputs(
    inputs: Any,
    additional_forward_args: Any = None,
    tokens: Optional[TokenOptions] = None,
) -> TokenInputs:
    r"""Checks the ids and mask as the methods do
    (:func:`captum_ext._utils.token_ids.parse_token_ids`) and marks the special
    positions of ``tokens`` (a :class:`TokenOptions`; None: no special position).
    Further items of ``additional_forward_args`` go to ``forward_func`` unchanged.
    """
    tokens = tokens or TokenOptions()
    input_ids, attention_mask, rest = parse_token_ids(
        inputs, additional_forward_args, tokens.pad_token_id
    )
    special = _special_positions(input_ids, tokens) & attention_mask.bool()
    return TokenInputs(input_ids, attention_mask, rest, special=special)


def _special_positions(input_ids: Tensor, tokens: TokenOptions) -> Tensor:
    special = torch.zeros_like(input_ids, dtype=torch.bool)
    if tokens.special_tokens_mask is not None:
        mask = tokens.special_tokens_mask
        check_same_shape("special_tokens_mask", mask, input_ids)
        special |= mask.to(input_ids.device).bool()
    if tokens.special_token_ids is not None:
        ids = torch.as_tensor(tokens.special_token_ids, device=input_ids.device)
        special |= torch.isin(input_ids, ids.to(input_ids.dtype))
    return special


def check_attributions(
    attributions: Any, inputs: TokenInputs, name: str = "attributions"
) -> Tensor:
    r"""Returns ``attributions`` as a float tensor ``[batch, pos]``.

    Raises on another shape (token attributions have one score per position; sum
    embedding-level attributions over their last dimension first) and on
    non-finite scores at real tokens.
    """
    scores = attributions[0] if _is_single_tuple(attributions) else attributions
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


def _is_single_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 1


def check_evidence(evidence_mask: Any, inputs: TokenInputs) -> Tensor:
    r"""Returns the evidence mask ``[batch, pos]`` as booleans."""
    check_same_shape("evidence_mask", evidence_mask, inputs.input_ids)
    mask: Tensor = evidence_mask.to(inputs.input_ids.device).bool()
    return mask
