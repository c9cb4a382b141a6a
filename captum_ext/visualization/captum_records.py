#!/usr/bin/env python3
r"""Export to Captum's visualizer: :func:`visualization_records` turns an
:class:`~captum_ext.visualization.Explanation` into Captum
``VisualizationDataRecord`` objects, :func:`to_records` your own tensors."""

from typing import Any, List, Optional, Sequence

import torch
from captum.attr import visualization as captum_viz
from torch import Tensor

from captum_ext.visualization.escaping import html_safe
from captum_ext.visualization.records import Explanation
from captum_ext.visualization.tokens import (
    display_texts,
    normalize,
    special_token_mask,
    word_groups,
)

__all__ = ["to_records", "visualization_records"]


def _word_scores(
    groups: List[List[int]], scores: Tensor, specials: List[bool]
) -> Tensor:
    r"""Each word's score: the sum of its pieces' scores (attributions add up),
    scaled over the real words; special words get 0 (Captum has no grey)."""
    raw = torch.nan_to_num(scores.detach().float().cpu(), 0.0, 0.0, 0.0)
    summed = torch.stack([raw[group].sum() for group in groups])
    word_special = [specials[group[0]] for group in groups]
    scaled = normalize(summed, word_special)
    return scaled.masked_fill(torch.tensor(word_special, dtype=torch.bool), 0.0)


def visualization_records(
    explanation: Explanation,
) -> List[captum_viz.VisualizationDataRecord]:
    r"""One Captum ``VisualizationDataRecord`` per method, for
    ``captum.attr.visualization.visualize_text``.

    ``raw_input_ids`` are whole words (pieces joined), HTML-escaped, because
    ``visualize_text`` inserts them into its markup as they are (captum issue
    #1226). ``word_attributions`` are each word's summed piece scores scaled
    into ``[-1, 1]`` over the real words (Captum's colour range); special
    tokens get ``0`` (uncoloured). ``attr_score`` is the sum of the unscaled
    scores, ``attr_class`` names the method and the explained class,
    ``convergence_score`` is ``nan`` (only Integrated Gradients has one).
    """
    specials = explanation.specials()
    groups = word_groups(explanation.tokens, specials)
    texts = display_texts(explanation.tokens, specials)
    words = [html_safe("".join(texts[i] for i in group)) for group in groups]
    label = explanation.label
    return [
        captum_viz.VisualizationDataRecord(
            word_attributions=_word_scores(groups, scores, specials),
            pred_prob=float(explanation.pred_prob),
            pred_class=html_safe(label(explanation.pred_class)),
            true_class=html_safe(label(explanation.true_class)),
            attr_class=html_safe(f"{name}: {label(explanation.target)}"),
            attr_score=float(scores.sum()),
            raw_input_ids=words,
            convergence_score=float("nan"),
        )
        for name, scores in explanation.scores.items()
    ]


def to_records(
    tokenizer: Any,
    input_ids: Tensor,
    attributions: Tensor,
    *,
    attention_mask: Optional[Tensor] = None,
    logits: Optional[Tensor] = None,
    target: Optional[Tensor] = None,
    true_class: Optional[Sequence[int]] = None,
    label_names: Optional[Sequence[str]] = None,
    method: str = "attribution",
) -> List[captum_viz.VisualizationDataRecord]:
    r"""Captum records for your own tensors, one per example::

        scores = AttCAT(model).attribute(input_ids, additional_forward_args=(mask,))
        records = to_records(tokenizer, input_ids, scores, attention_mask=mask)
        captum.attr.visualization.visualize_text(records)  # pip install ".[viz]"

    Pads (``attention_mask == 0``) are dropped, the tokenizer's special tokens
    greyed out of the scale and word pieces joined (see
    :func:`visualization_records`).

    Args:
        tokenizer (PreTrainedTokenizerBase): the tokenizer that made
            ``input_ids`` (``convert_ids_to_tokens``, ``all_special_ids``).
        input_ids (Tensor): ``[batch, seq]`` token ids.
        attributions (Tensor): ``[batch, seq]`` scores, e.g. any captum_ext
            method's output.
        attention_mask (Tensor, optional): ``[batch, seq]``; default all ones.
        logits (Tensor, optional): ``[batch, classes]`` model outputs, for the
            predicted class and its probability. Default: unknown (``nan``).
        target (Tensor, optional): ``[batch]`` explained classes. Default: the
            predicted class when ``logits`` are given.
        true_class (Sequence[int], optional): gold classes, if known.
        label_names (Sequence[str], optional): class names (e.g. from
            ``model.config.id2label``). Default: class indices.
        method (str, optional): the name shown in the records. Default:
            ``"attribution"``.

    Returns:
        list[VisualizationDataRecord]: one record per example.
    """
    if input_ids.shape != attributions.shape:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attributions "
            f"{tuple(attributions.shape)} must have the same [batch, seq] shape"
        )
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    probs = None if logits is None else logits.detach().float().softmax(-1).cpu()
    records = []
    for row in range(input_ids.shape[0]):
        valid = mask[row].bool()
        ids = input_ids[row, valid].tolist()
        predicted = -1 if probs is None else int(probs[row].argmax())
        explained = predicted if target is None else int(target[row])
        explanation = Explanation(
            tokens=tokenizer.convert_ids_to_tokens(ids),
            scores={method: attributions[row, valid]},
            label_names=list(label_names or []),
            pred_class=predicted,
            pred_prob=float("nan") if probs is None else float(probs[row, predicted]),
            target=explained,
            true_class=None if true_class is None else int(true_class[row]),
            special_mask=special_token_mask(tokenizer, ids),
        )
        records += visualization_records(explanation)
    return records
