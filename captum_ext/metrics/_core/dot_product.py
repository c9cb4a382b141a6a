#!/usr/bin/env python3

from typing import Optional

import torch
from captum._utils.typing import TensorOrTupleOfTensorsGeneric
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext.metrics._utils.inputs import (
    check_attributions,
    check_evidence,
    parse_inputs,
    TokenOptions,
)

_NORMALIZATIONS = ("softmax", "l1", None)


@log_usage()
def dot_product(
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: TensorOrTupleOfTensorsGeneric,
    evidence_mask: Tensor,
    additional_forward_args: Optional[object] = None,
    *,
    normalize: Optional[str] = "softmax",
    tokens: Optional[TokenOptions] = None,
) -> Tensor:
    r"""
    Plausibility as the share of attribution mass on the known evidence
    tokens: the dot product of the normalised scores with the evidence mask,

    .. math::
        \mathrm{DP}(x) = \sum_{j} \hat S_j\, e_j, \qquad
        \hat S = \mathrm{softmax}(S)

    over the real non-special tokens. Higher is more plausible. NormXLogit
    (Experiment 2, https://github.com/sinaabbasi1/NormXLogit) uses the softmax
    normalisation (the default); ``"l1"`` gives :math:`|S_j| / \sum_k |S_k|`
    (the reference's commented-out alternative) and None the raw scores.

    Args:

        inputs (Tensor): token ids ``[batch, pos]``, padded left or right.
        attributions (Tensor): one score per token ``[batch, pos]``; higher = more
                important for ``target``, where the metric has one. Sum embedding-level
                attributions over their last dimension first.
        evidence_mask (Tensor): ``[batch, pos]``, 1 on evidence tokens.
        additional_forward_args (Tensor or tuple, optional): ``attention_mask`` or
                ``(attention_mask, *rest)``, passed to ``forward_func`` after the ids
                (the plausibility metrics read only the mask); ``[batch, pos]`` tensors
                follow their tokens when tokens are deleted. Default: None (no padding)
        normalize (str, optional): ``"softmax"``, ``"l1"`` or None.
                Default: ``"softmax"``
        tokens (TokenOptions, optional): the [MASK], [PAD] and special ids
                (:class:`TokenOptions`). Special positions are never perturbed, ranked
                or counted, unless a preset says otherwise. Default: None (no special
                position)

    Returns:
        Tensor: ``[batch]``.
    """
    if normalize not in _NORMALIZATIONS:
        raise ValueError(
            f"normalize must be one of {_NORMALIZATIONS}, got {normalize!r}"
        )
    parsed = parse_inputs(inputs, additional_forward_args, tokens)
    scores = check_attributions(attributions, parsed)
    counted = parsed.content
    evidence = check_evidence(evidence_mask, parsed) & counted
    if normalize == "softmax":
        scores = scores.masked_fill(~counted, float("-inf")).softmax(1)
    elif normalize == "l1":
        magnitude = scores.abs() * counted
        scores = magnitude / magnitude.sum(1, keepdim=True)
    product = torch.where(evidence, scores, 0.0).sum(1)
    return product.float()
