#!/usr/bin/env python3
r"""Explaining one text with several methods at once: what ``captum-ext explain``
prints, as a Python call.

>>> from captum_ext.evaluation.explain import explain
>>> from captum_ext.visualization import explanation_text
>>> explanation = explain(model, tokenizer, "It's not bad at all.",
...                       methods=["AttCAT", "NormXLogit"])
>>> print(explanation_text(explanation))

The returned :class:`~captum_ext.visualization.Explanation` also feeds
:func:`~captum_ext.visualization.explanation_html` and Captum's visualizer.
"""

import warnings
from typing import Any, List, Optional, Sequence

import torch
from torch import nn

from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.model_forward import classifier_forward
from captum_ext._utils.token_batch import check_tokenizer_vocabulary
from captum_ext.adapters import get_adapter
from captum_ext.evaluation.engine import checked_max_length
from captum_ext.evaluation.names import check_names
from captum_ext.evaluation.registry import METHODS
from captum_ext.visualization import Explanation, special_token_mask

__all__ = ["default_methods", "explain"]


def default_methods(with_decoders: bool) -> List[str]:
    r"""Every registered method but the controls (random), and without those
    that fit decoders unless texts to fit them on are given."""
    return [
        name
        for name, spec in METHODS.items()
        if spec.family != "control" and (with_decoders or not spec.needs_decoders)
    ]


def _encode(tokenizer: Any, text: str, text_pair: Optional[str], max_length: int):
    if not text.strip():
        raise ValueError("the text is empty: give some words to explain")
    full = tokenizer(text, text_pair, truncation=False, verbose=False)["input_ids"]
    encoded = tokenizer(text, text_pair, truncation=True, max_length=max_length)
    if len(full) > len(encoded["input_ids"]):
        warnings.warn(
            f"the text has {len(full)} tokens and was cut to max_length="
            f"{max_length}; raise max_length (--max-length) to explain all of it",
            stacklevel=3,
        )
    return encoded


def explain(
    model: nn.Module,
    tokenizer: Any,
    text: str,
    methods: Optional[Sequence[str]] = None,
    target: Optional[int] = None,
    max_length: Optional[int] = None,
    *,
    text_pair: Optional[str] = None,
    decoder_texts: Optional[Sequence[str]] = None,
) -> Explanation:
    r"""Every chosen method's token scores for one text (or text pair), for
    the predicted class or for ``target``.

    Args:
        model (nn.Module): a Hugging Face sequence classifier in eval mode
            (e.g. from :func:`captum_ext.evaluation.load_classifier`).
        tokenizer (PreTrainedTokenizerBase): its tokenizer.
        text (str): the input; must not be empty.
        methods (Sequence[str], optional): names in
            :data:`captum_ext.evaluation.registry.METHODS`. Default:
            :func:`default_methods`.
        target (int, optional): class to explain, in ``[0, num_labels)``.
            Default: the predicted class.
        max_length (int, optional): truncation length, at most the model's
            positions; a warning says when the text is cut. Default: what the
            tokenizer and model allow.
        text_pair (str, optional): second segment (NLI, paraphrase).
        decoder_texts (Sequence[str], optional): real texts to fit Decoded
            Grad-CAM's decoders on (needed only for that method).

    Returns:
        Explanation: tokens, one score row per method, label names, prediction.
    """
    names = check_names(methods, METHODS, "method") if methods is not None else None
    names = names or default_methods(with_decoders=decoder_texts is not None)
    check_tokenizer_vocabulary(get_adapter(model), tokenizer)
    device = next(model.parameters()).device
    length = checked_max_length(model, tokenizer, max_length)
    encoded = _encode(tokenizer, text, text_pair, length)
    input_ids = torch.tensor([encoded["input_ids"]], device=device)  # [1, pos]
    mask = torch.ones_like(input_ids)
    types = encoded.get("token_type_ids") if text_pair is not None else None
    type_ids = None if types is None else torch.tensor([types], device=device)
    with torch.no_grad(), eval_semantics(model):
        logits = classifier_forward(model)(input_ids, mask, type_ids)
    probs = logits.float().softmax(-1)[0]  # [classes]
    predicted = int(probs.argmax())
    if target is not None and not 0 <= target < len(probs):
        raise ValueError(
            f"target {target} is not a class of this model: choose one in "
            f"0..{len(probs) - 1}"
        )
    chosen = predicted if target is None else target
    target_tensor = torch.tensor([chosen], device=device)
    scores = {
        name: METHODS[name]
        .build(model, tokenizer, decoder_texts)(
            input_ids, mask, target_tensor, type_ids
        )[0]
        .detach()
        .float()
        .cpu()
        for name in names
    }
    id2label = getattr(model.config, "id2label", None) or {}
    return Explanation(
        tokens=tokenizer.convert_ids_to_tokens(encoded["input_ids"]),
        scores=scores,
        label_names=[str(id2label.get(i, i)) for i in range(len(probs))],
        pred_class=predicted,
        pred_prob=float(probs[predicted]),
        target=chosen,
        special_mask=special_token_mask(tokenizer, encoded["input_ids"]),
        text=text if text_pair is None else f"{text} / {text_pair}",
    )
