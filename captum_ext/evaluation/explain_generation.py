#!/usr/bin/env python3
r"""Explaining what a causal LM generates from one prompt with several methods
at once: what ``captum-ext explain-generation`` prints, as a Python call.

>>> from captum_ext.evaluation.explain_generation import explain_generation
>>> from captum_ext.visualization import generation_text
>>> explanation = explain_generation(model, tokenizer, "the cat sat on",
...                                  methods=["AttCAT", "FeatureAblation"])
>>> print(generation_text(explanation))

The prompt is tokenised as Captum's ``TextTokenInput`` does (the tokenizer's
BOS kept) or, with ``chat=True``, through the tokenizer's chat template; the
continuation is the given text (encoded without special tokens) or the model's
greedy one. Every method gets the same ids through
:meth:`~captum_ext.evaluation.registry.MethodSpec.build_generation`. With
``sources="sentences"`` or ``"lines"`` the columns are the prompt's sources
(:func:`~captum_ext.attr._utils.prompt_sources.prompt_sources`), each scored by
the sum of its tokens' scores.
"""

from dataclasses import replace
from typing import Any, List, Optional, Sequence

import torch
from torch import nn, Tensor

from captum_ext._utils.positive_int import check_positive_int
from captum_ext._utils.token_batch import check_tokenizer_vocabulary
from captum_ext.adapters import get_adapter
from captum_ext.attr._utils.continuations import generate_continuations
from captum_ext.attr._utils.llm_prompts import check_text, prepare_prompt, Prompt
from captum_ext.attr._utils.prompt_sources import prompt_sources
from captum_ext.evaluation.names import check_names, GENERATION_METHOD_NAMES
from captum_ext.evaluation.options import continuation_gen_args
from captum_ext.evaluation.registry import METHODS
from captum_ext.visualization import GenerationExplanation, special_token_mask

__all__ = ["default_generation_methods", "explain_generation"]


def default_generation_methods() -> List[str]:
    r"""Every method that explains generated text but the controls (random)."""
    return [n for n in GENERATION_METHOD_NAMES if METHODS[n].family != "control"]


def _continuation(
    model: nn.Module,
    tokenizer: Any,
    ids: Tensor,
    target: Optional[str],
    max_new_tokens: Optional[int],
) -> Tensor:
    r"""``[T]``: ``target`` encoded without special tokens (no BOS inside a
    continuation), or the model's greedy continuation of ``ids`` ``[1, P]``."""
    if target is None:
        mask = torch.ones_like(ids)
        gen_args = continuation_gen_args(max_new_tokens)
        return generate_continuations(model, tokenizer, ids, mask, gen_args)[0]
    check_text(target, "the target")
    encoded = tokenizer(target, add_special_tokens=False)["input_ids"]
    if not encoded:
        raise ValueError("the target is empty: give the continuation's text")
    return torch.tensor(encoded, device=ids.device)


def explain_generation(
    model: nn.Module,
    tokenizer: Any,
    prompt: str,
    methods: Optional[Sequence[str]] = None,
    target: Optional[str] = None,
    max_new_tokens: Optional[int] = None,
    chat: bool = False,
    sources: str = "tokens",
) -> GenerationExplanation:
    r"""Every chosen method's target x prompt scores for one prompt and its
    continuation.

    Args:
        model (nn.Module): a Hugging Face causal LM in eval mode (e.g. from
            :func:`captum_ext.evaluation.user_models.load_causal_lm`).
        tokenizer (PreTrainedTokenizerBase): its tokenizer.
        prompt (str): the prompt; must not be empty.
        methods (Sequence[str], optional): names in
            :data:`~captum_ext.evaluation.names.GENERATION_METHOD_NAMES`.
            Default: :func:`default_generation_methods`.
        target (str, optional): the continuation to explain. Default: the
            model's greedy continuation.
        max_new_tokens (int, optional): tokens to generate when ``target`` is
            None. Default:
            :data:`~captum_ext.evaluation.options.DEFAULT_MAX_NEW_TOKENS`.
        chat (bool, optional): the prompt is one user message of the
            tokenizer's chat template. Default: False
        sources (str, optional): the prompt's columns: ``"tokens"``, or
            ``"sentences"`` / ``"lines"`` of a plain prompt, each the sum of its
            tokens' scores. Default: ``"tokens"``

    Returns:
        GenerationExplanation: prompt columns and target tokens, one ``[T, P]``
        (``[T, sources]``) matrix per method.
    """
    names = (
        check_names(methods, GENERATION_METHOD_NAMES, "method for generated text")
        or default_generation_methods()
    )
    if target is not None and max_new_tokens is not None:
        raise ValueError("give a target or max_new_tokens (to generate), not both")
    check_positive_int(max_new_tokens, "max_new_tokens")
    if not prompt.strip():
        raise ValueError("the prompt is empty: give some words to continue")
    adapter = get_adapter(model)
    adapter.require_causal_lm("explain-generation")
    check_tokenizer_vocabulary(adapter, tokenizer)
    device = adapter.input_device()  # a model placed by accelerate too
    prepared = prepare_prompt(prompt, tokenizer, chat=chat)
    grouped = _sources(prepared, prompt, tokenizer, sources, chat)
    ids = prepared.ids.to(device)[None]  # [1, P]
    continuation = _continuation(model, tokenizer, ids, target, max_new_tokens)
    scores = {
        name: METHODS[name]
        .build_generation(model, tokenizer)(
            ids, torch.ones_like(ids), continuation[None]
        )[0]
        .float()
        .cpu()
        for name in names
    }  # name -> [T, P]
    explanation = GenerationExplanation(
        prompt_tokens=tokenizer.convert_ids_to_tokens(prepared.ids.tolist()),
        target_tokens=tokenizer.convert_ids_to_tokens(continuation.tolist()),
        scores=scores,
        prompt=prompt,
        continuation=tokenizer.decode(continuation.tolist()),
        generated=target is None,
        special_mask=_special_mask(tokenizer, prepared),
    )
    if grouped is None:
        return explanation
    return _by_source(explanation, grouped, sources)


def _special_mask(tokenizer: Any, prepared: Prompt) -> List[bool]:
    specials = special_token_mask(tokenizer, prepared.ids.tolist())
    template = (prepared.feature_of < 0).tolist()  # a chat template's own tokens
    return [s or t for s, t in zip(specials, template)]


def _by_source(
    explanation: GenerationExplanation, grouped: Prompt, kind: str
) -> GenerationExplanation:
    r"""``explanation`` with one column per source: its text, and the sum of
    its tokens' scores in every row."""
    scores = explanation.scores.items()
    return replace(
        explanation,
        prompt_tokens=[name.strip() for name in grouped.names],
        scores={name: grouped.feature_scores(s) for name, s in scores},
        special_mask=None,
        prompt_unit=kind[:-1],  # "sentences" -> "sentence"
    )


def _sources(
    prepared: Prompt, prompt: str, tokenizer: Any, kind: str, chat: bool
) -> Optional[Prompt]:
    r"""The prompt split into sources of ``kind``, each token mapped to the
    source it falls in (:class:`~captum_ext.attr.LLMTokenAttribution`'s
    ``TextTemplateInput`` features); None for ``kind="tokens"``."""
    if kind == "tokens":
        return None
    if chat:
        raise ValueError(
            f"sources={kind!r} applies to a plain prompt, not to a chat; score a "
            "chat's tokens"
        )
    grouped = prepare_prompt(prompt_sources(prompt, kind), tokenizer)
    if not torch.equal(grouped.ids, prepared.ids):
        raise RuntimeError(
            "the tokenizer encodes the prompt differently once it is split into "
            "sources; score its tokens instead"
        )
    return grouped
