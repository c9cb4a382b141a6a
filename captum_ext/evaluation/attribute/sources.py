#!/usr/bin/env python3
r"""``attribute --sources``: a causal LM's prompts scored by sentences or lines
instead of tokens. Each prompt is split by
:func:`~captum_ext.attr._utils.prompt_sources.prompt_sources` and its tokens
mapped to sources as :class:`~captum_ext.attr.LLMTokenAttribution` maps a
``TextTemplateInput``'s; a source's score is the sum of its tokens' scores."""

from typing import Any, List, Optional, Sequence

import torch

from captum_ext.attr._utils.llm_prompts import prepare_prompt, Prompt
from captum_ext.attr._utils.prompt_sources import prompt_sources
from captum_ext.evaluation.user_data import DataError, LoadedExamples

__all__ = ["by_source", "prompt_groups"]


def prompt_groups(
    tokenizer: Any, data: LoadedExamples, prompts: Sequence[List[int]], kind: str
) -> Optional[List[Prompt]]:
    r"""Each prompt's tokens grouped into its sources of ``kind``
    (``"sentences"`` or ``"lines"``), or None for ``kind="tokens"``.
    :class:`DataError` names the rows whose tokens change when the prompt is
    split (``prompts``: the run's token ids; blank prompts are refused when
    the data is loaded)."""
    if kind == "tokens":
        return None
    groups = [prepare_prompt(prompt_sources(t, kind), tokenizer) for t in data.texts]
    changed = [
        row
        for row, group, ids in zip(data.rows, groups, prompts)
        if group.ids.tolist() != list(ids)
    ]
    if changed:
        raise DataError(
            f"{data.source}: the tokenizer encodes the prompt of row(s) "
            f"{changed[:10]} differently once it is split into {kind}; score "
            "their tokens (--sources tokens)"
        )
    return groups


def by_source(
    matrices: List[List[List[float]]], groups: Sequence[Prompt]
) -> List[List[List[float]]]:
    r"""Each prompt's ``[T][P]`` token scores as ``[T][S]``: the sum over
    each source's tokens."""
    return [
        group.feature_scores(torch.tensor(matrix)).tolist()
        for matrix, group in zip(matrices, groups)
    ]
