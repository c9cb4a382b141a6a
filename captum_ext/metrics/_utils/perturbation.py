#!/usr/bin/env python3
r"""Which tokens each perturbation level touches, and the perturbed inputs.

A :class:`PerturbationPlan` holds, per example, the rank of every perturbable
token and, per level, how many of the top-ranked ones are perturbed (or kept).
Perturbed rows are built only for the rows of one chunk at a time.
"""

from dataclasses import dataclass
from typing import Any, Tuple

import torch
from torch import Tensor

from captum_ext._utils.row_chunks import take_rows
from captum_ext.metrics._utils.inputs import TokenInputs, TokenOptions
from captum_ext.metrics._utils.protocols import PerturbationProtocol
from captum_ext.metrics._utils.ranking import descending_order, ranks_within

__all__ = [
    "PerturbationPlan",
    "check_token_ids",
    "perturb_rows",
    "plan_perturbations",
]


@dataclass
class PerturbationPlan:
    r"""Per example ``ranks`` ``[batch, pos]`` (-1: never perturbed), per level
    ``counts`` ``[batch, levels]``, ``active`` levels (False: skipped) and
    ``included`` examples (False: skipped entirely)."""

    ranks: Tensor
    counts: Tensor
    active: Tensor
    included: Tensor
    num_perturbable: Tensor  # [batch]: how many tokens may be perturbed
    keep_top: bool  # perturb every perturbable token but the top-k

    def touches(self) -> Tensor:
        r"""``[batch, levels]``: the level perturbs at least one token."""
        if self.keep_top:
            return self.counts < self.num_perturbable[:, None]
        return self.counts > 0

    def perturbed(self, examples: Tensor, levels: Tensor) -> Tensor:
        r"""Boolean ``[rows, pos]``: the positions perturbed in each row."""
        ranks = self.ranks[examples]
        counts = self.counts[examples, levels][:, None]
        if self.keep_top:
            return ranks >= counts
        return (ranks >= 0) & (ranks < counts)


def plan_perturbations(
    protocol: PerturbationProtocol,
    inputs: TokenInputs,
    scores: Tensor,
    keep_top: bool,
) -> PerturbationPlan:
    r"""Ranks tokens by decreasing score (ties: lower position first) and turns
    the protocol's levels into token counts."""
    perturbable = _perturbable(protocol, inputs, scores)
    ranks = ranks_within(scores, perturbable)
    cap = (perturbable & (scores > 0)) if protocol.only_positive else perturbable
    counts = torch.minimum(_raw_counts(protocol, inputs), cap.sum(1, keepdim=True))
    included = inputs.valid.sum(1) >= protocol.min_length
    active = included[:, None].expand_as(counts).clone()
    if protocol.skip_repeated:
        previous = torch.nn.functional.pad(counts[:, :-1], (1, 0))
        active &= (counts > 0) & (counts > previous)
    return PerturbationPlan(
        ranks, counts, active, included, perturbable.sum(1), keep_top
    )


def _perturbable(
    protocol: PerturbationProtocol, inputs: TokenInputs, scores: Tensor
) -> Tensor:
    valid = inputs.valid
    if protocol.protect == "specials":
        perturbable = inputs.content.clone()
    else:
        first = valid.int().argmax(1, keepdim=True)
        positions = torch.arange(valid.shape[1], device=valid.device)
        perturbable = valid & (positions != first)
    if protocol.protect_last_ranked:
        # AttCAT scans the ranking of all real tokens up to its second-to-last
        # entry, so the last-ranked token is never reached.
        order = descending_order(scores, valid)
        last = order.gather(1, valid.sum(1, keepdim=True) - 1)
        perturbable.scatter_(1, last, False)
    return perturbable


def _raw_counts(protocol: PerturbationProtocol, inputs: TokenInputs) -> Tensor:
    tokens = inputs.valid if protocol.count_specials else inputs.content
    n = tokens.sum(1).double()
    levels = torch.tensor(protocol.levels, dtype=torch.float64, device=n.device)
    raw = levels[None, :] * n[:, None]
    # torch.round rounds half to even, like numpy.round in the reference code.
    rounded = torch.round(raw) if protocol.rounding == "round" else torch.floor(raw)
    return rounded.long()


def check_token_ids(protocol: PerturbationProtocol, tokens: TokenOptions) -> None:
    r"""Raises when the protocol's replacement token id was not given."""
    for mode, name, token in (
        ("mask", "mask_token_id", tokens.mask_token_id),
        ("pad", "pad_token_id", tokens.pad_token_id),
    ):
        if protocol.mode == mode and token is None:
            raise ValueError(
                f"mode={mode!r} replaces tokens with [{mode.upper()}]: pass "
                f"tokens=TokenOptions({name}=tokenizer.{name}) or "
                "TokenOptions.from_tokenizer(tokenizer)"
            )


def perturb_rows(
    protocol: PerturbationProtocol,
    inputs: TokenInputs,
    examples: Tensor,
    perturbed: Tensor,
    tokens: TokenOptions,
) -> Tuple[Tensor, Tuple[Any, ...]]:
    r"""Token ids and forward arguments of the rows ``examples`` with the
    ``perturbed`` positions deleted or replaced."""
    input_ids = inputs.input_ids[examples]
    extra = tuple(
        take_rows(arg, examples, inputs.batch_size) for arg in inputs.extra_args
    )
    if protocol.mode == "delete":
        filler = 0 if tokens.pad_token_id is None else tokens.pad_token_id
        return _repack(
            input_ids,
            inputs.attention_mask.dtype,
            inputs.valid[examples] & ~perturbed,
            inputs.left_padded[examples],
            extra,
            filler,
        )
    token = tokens.mask_token_id if protocol.mode == "mask" else tokens.pad_token_id
    input_ids = input_ids.masked_fill(perturbed, token)  # type: ignore[arg-type]
    mask = inputs.attention_mask[examples]
    if not protocol.attend_replaced:
        mask = mask.masked_fill(perturbed, 0)
    return input_ids, (mask, *extra)


def _repack(
    input_ids: Tensor,
    mask_dtype: torch.dtype,
    keep: Tensor,
    left_padded: Tensor,
    extra: Tuple[Any, ...],
    filler: int,
) -> Tuple[Tensor, Tuple[Any, ...]]:
    r"""Moves the kept tokens together, on the side they were on (left-padded rows
    stay left-padded, which causal classifiers rely on), and drops the columns
    that no row uses any more."""
    key = torch.where(left_padded[:, None], keep, ~keep).to(torch.int8)
    order = torch.sort(key, dim=1, stable=True).indices
    kept = keep.gather(1, order)
    columns = kept.any(0)
    if not bool(columns.any()):
        columns[0] = True  # models need one column even when all was deleted
    input_ids = input_ids.gather(1, order).masked_fill(~kept, filler)[:, columns]
    extra = tuple(
        (
            arg.gather(1, order)[:, columns]
            if isinstance(arg, Tensor) and arg.shape == keep.shape
            else arg
        )
        for arg in extra
    )
    return input_ids, (kept.to(mask_dtype)[:, columns], *extra)
