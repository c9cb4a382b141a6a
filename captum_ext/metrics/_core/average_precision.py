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
from captum_ext.metrics._utils.ranking import descending_order


@log_usage()
def average_precision(
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: TensorOrTupleOfTensorsGeneric,
    evidence_mask: Tensor,
    additional_forward_args: Optional[object] = None,
    *,
    tokens: Optional[TokenOptions] = None,
) -> Tensor:
    r"""
    Plausibility as average precision: how early the known evidence tokens
    (cue words, human rationales) appear in the ranking of the attributions.
    With tokens ranked by decreasing score, :math:`E` the evidence and
    :math:`P@r` the precision of the top :math:`r`:

    .. math::
        \mathrm{AP}(x) = \frac{1}{|E|} \sum_{r:\, \mathrm{token}_r \in E} P@r
        = \sum_{r} (R@r - R@(r-1))\, P@r

    Higher is more plausible; 1 when every evidence token outranks every other
    token. The second form is NormXLogit's ``avg_precision`` (Experiment 2,
    evidence alignment on BLiMP, https://github.com/sinaabbasi1/NormXLogit):
    one rank per token, no interpolation. Ties in score go to the lower
    position.

    Ranked tokens are the real tokens minus the special ones; evidence on
    other positions is ignored.

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
        tokens (TokenOptions, optional): the [MASK], [PAD] and special ids
                (:class:`TokenOptions`). Special positions are never perturbed, ranked
                or counted, unless a preset says otherwise. Default: None (no special
                position)

    Returns:
        Tensor: ``[batch]`` AP; NaN for an example without evidence.
    """
    parsed = parse_inputs(inputs, additional_forward_args, tokens)
    scores = check_attributions(attributions, parsed)
    ranked = parsed.content
    evidence = check_evidence(evidence_mask, parsed) & ranked
    order = descending_order(scores, ranked)
    hits = evidence.gather(1, order).double()
    rank = torch.arange(1, order.shape[1] + 1, device=order.device)
    precision = hits.cumsum(1) / rank
    return ((precision * hits).sum(1) / evidence.sum(1)).float()
