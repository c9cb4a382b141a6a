#!/usr/bin/env python3

from typing import Callable, Optional

import torch
from captum._utils.typing import TargetType, TensorOrTupleOfTensorsGeneric
from torch import Tensor

from captum_ext._utils.log import log_usage
from captum_ext._utils.target import resolve_target
from captum_ext.metrics._utils.forward_runner import progress_bar, Runner
from captum_ext.metrics._utils.inputs import (
    check_attributions,
    parse_inputs,
    TokenOptions,
)
from captum_ext.metrics._utils.results import TokenOverlapResult


@log_usage()
def token_overlap(
    forward_func: Callable[..., Tensor],
    inputs: TensorOrTupleOfTensorsGeneric,
    attributions: TensorOrTupleOfTensorsGeneric,
    target: TargetType = None,
    additional_forward_args: Optional[object] = None,
    *,
    top_k: int = 10,
    idf: Optional[Tensor] = None,
    tokens: Optional[TokenOptions] = None,
    internal_batch_size: Optional[int] = None,
) -> TokenOverlapResult:
    r"""
    Token overlap between classes: how many of the tokens an explainer finds
    most important for one class are also among the most important for
    another. For each class :math:`c`, token scores are summed over the
    examples whose target is :math:`c`, optionally weighted by IDF, and the
    top :math:`k` tokens :math:`T_c` kept:

    .. math::
        s_c(w) = \mathrm{idf}(w) \sum_{i:\, y_i = c}\; \sum_{j:\, x_{ij} = w}
        S_{ij}, \qquad
        \mathrm{overlap} = \frac{1}{\binom{C}{2}\, k}
        \sum_{c_1 < c_2} |T_{c_1} \cap T_{c_2}|

    Lower means more class-specific explanations. Hou & Castanon, *Decoding
    Layer Saliency in Language Transformers*, ICML 2023 (IDF from 50,000
    Wikipedia articles there; any IDF table can be passed).

    This is a corpus-level metric: pass the whole evaluation set (the classes
    compared are the targets present in it). Padding and special tokens are
    never counted. Only tokens that occur in a class's examples can be among
    its top tokens; ties go to the lower token id.

    Args:

        forward_func (Callable): ``forward_func(input_ids, attention_mask, *rest) ->
                logits [batch, C]``, e.g. :func:`captum_ext.classifier_forward`; a
                module runs in eval mode. Run on the inputs (for the predicted class and
                the number of classes) and, by the perturbation-curve metrics, on every
                perturbed level.
        inputs (Tensor): token ids ``[batch, pos]``, padded left or right.
        attributions (Tensor): one score per token ``[batch, pos]``; higher = more
                important for ``target``, where the metric has one. Sum embedding-level
                attributions over their last dimension first.
        target (int, list or Tensor, optional): the class of each example. None:
                the model's predicted class. Default: None
        additional_forward_args (Tensor or tuple, optional): ``attention_mask`` or
                ``(attention_mask, *rest)``, passed to ``forward_func`` after the ids
                (the plausibility metrics read only the mask); ``[batch, pos]`` tensors
                follow their tokens when tokens are deleted. Default: None (no padding)
        top_k (int, optional): tokens kept per class. Default: 10
        idf (Tensor, optional): IDF weight per token id, ``[vocab]``.
                Default: None (no weighting)
        tokens (TokenOptions, optional): the [MASK], [PAD] and special ids
                (:class:`TokenOptions`). Special positions are never perturbed, ranked
                or counted, unless a preset says otherwise. Default: None (no special
                position)
        internal_batch_size (int, optional): most rows per forward pass: examples, or
                (example, level) pairs of every curve; results do not depend on it.
                Default: None (the batch size)

    Returns:
        TokenOverlapResult: ``score`` (0-d; NaN with fewer than two classes),
        ``classes`` and their ``top_tokens``.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    parsed = parse_inputs(inputs, additional_forward_args, tokens)
    scores = check_attributions(attributions, parsed)
    runner = Runner(
        forward_func, parsed, internal_batch_size, progress_bar(False, "", 0)
    )
    with torch.no_grad():
        classes_per_example = resolve_target(target, runner.base())
    counted = parsed.content
    ids = parsed.input_ids[counted]
    token_scores = scores[counted]
    owners = classes_per_example[:, None].expand_as(counted)[counted]
    classes, owner_index = torch.unique(owners, return_inverse=True)
    vocabulary, token_index = torch.unique(ids, return_inverse=True)
    table = scores.new_zeros(len(classes), len(vocabulary))
    table.index_put_((owner_index, token_index), token_scores, accumulate=True)
    present = torch.zeros_like(table, dtype=torch.bool)
    present[owner_index, token_index] = True
    if idf is not None:
        table = table * _idf_weights(idf, vocabulary)
    top_tokens = _top_tokens(table, present, vocabulary, top_k)
    return TokenOverlapResult(_overlap(top_tokens, top_k), classes, top_tokens)


def _idf_weights(idf: Tensor, vocabulary: Tensor) -> Tensor:
    if idf.dim() != 1 or int(vocabulary.max()) >= len(idf):
        raise ValueError(
            f"idf must be a 1-d tensor indexed by token id, covering id "
            f"{int(vocabulary.max())}; got shape {tuple(idf.shape)}"
        )
    return idf.to(vocabulary.device).double()[vocabulary]


def _top_tokens(
    table: Tensor, present: Tensor, vocabulary: Tensor, top_k: int
) -> Tensor:
    key = torch.where(present, -table, torch.full_like(table, float("inf")))
    # The vocabulary is sorted, so a stable sort gives ties to the lower token id.
    order = torch.sort(key, dim=1, stable=True).indices[:, :top_k]
    chosen = vocabulary[order]
    return torch.where(present.gather(1, order), chosen, torch.full_like(chosen, -1))


def _overlap(top_tokens: Tensor, top_k: int) -> Tensor:
    num_classes = top_tokens.shape[0]
    if num_classes < 2:
        return torch.tensor(float("nan"))
    shared = (top_tokens[:, None, :, None] == top_tokens[None, :, None, :]) & (
        top_tokens[:, None, :, None] >= 0
    )
    counts = shared.any(3).sum(2)
    pairs = torch.ones_like(counts, dtype=torch.bool).triu(1)
    total = counts[pairs].sum().double()
    return (total / (num_classes * (num_classes - 1) / 2 * top_k)).float()
