#!/usr/bin/env python3
r"""Prompts of :class:`~captum_ext.attr.LLMTokenAttribution`: token ids, and which
interpretable feature (a column of Captum's ``LLMAttributionResult``) each token
belongs to.

- Captum's ``TextTokenInput``: its own ids (``tokenizer.encode``, BOS included
  where the tokenizer adds one); every token is a feature but its
  ``skip_tokens``.
- A plain string: ``TextTokenInput(text, tokenizer, skip_tokens=skip_tokens)``.
- Captum's ``TextTemplateInput``: the completed text, tokenised as Captum does
  (``tokenizer.encode``); a token belongs to the segment (value) its characters
  overlap most, grouped by the input's ``mask``; tokens of the template's own
  text belong to no feature.
- A chat (a list of ``{"role", "content"}`` messages): the text of
  ``tokenizer.apply_chat_template(..., add_generation_prompt=True)``, tokenised
  without adding special tokens (the template writes its own); the tokens inside
  a message's content are the features, the template's tokens (role markers,
  BOS, separators) are special: the model reads them, they get no column.
"""

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from captum.attr import TextTemplateInput, TextTokenInput
from captum.attr._utils.interpretable_input import InterpretableInput
from torch import Tensor

__all__ = ["Prompt", "is_chat", "prepare_prompt"]

Span = Tuple[int, int]


@dataclass
class Prompt:
    r"""One prompt: ``ids`` ``[n]``, ``feature_of`` ``[n]`` (the interpretable
    feature of each token, -1 for none), how many interpretable features there
    are, the columns' names and Captum's input (None for a chat)."""

    ids: Tensor
    feature_of: Tensor
    n_features: int
    names: List[str]
    inp: Optional[InterpretableInput]

    def feature_scores(self, token_scores: Tensor) -> Tensor:
        r"""``[rows, features]`` from scores of the prompt's tokens ``[rows, n]``:
        the sum over each feature's tokens, spread to its segments as Captum's
        ``format_attr`` does."""
        index = self.feature_of.to(token_scores.device)
        kept = index >= 0
        summed = token_scores.new_zeros(token_scores.shape[0], self.n_features)
        summed.index_add_(1, index[kept], token_scores[:, kept])
        return summed if self.inp is None else self.inp.format_attr(summed)


def is_chat(value: Any) -> bool:
    r"""A chat is a non-empty list of ``{"role": ..., "content": ...}`` mappings."""
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(m, Mapping) for m in value)
    )


def prepare_prompt(
    inp: Any,
    tokenizer: Any,
    chat: bool = False,
    skip_tokens: Optional[Union[List[int], List[str]]] = None,
) -> Prompt:
    r"""A :class:`Prompt` from any accepted input (see the module docstring)."""
    if isinstance(inp, str) and chat:
        inp = [{"role": "user", "content": inp}]
    if is_chat(inp):
        return _chat_prompt(inp, tokenizer)
    if isinstance(inp, str):
        inp = TextTokenInput(inp, tokenizer, skip_tokens=skip_tokens)
    elif skip_tokens is not None:
        raise ValueError(
            "skip_tokens applies to plain-string prompts; give a TextTokenInput "
            "its own skip_tokens"
        )
    if isinstance(inp, TextTokenInput):
        return _token_prompt(inp)
    if isinstance(inp, TextTemplateInput):
        return _template_prompt(inp, tokenizer)
    raise TypeError(
        "a prompt is a string, Captum's TextTokenInput or TextTemplateInput, or a "
        f"chat (a list of {{'role', 'content'}} dicts); got {type(inp).__name__}"
    )


def _token_prompt(inp: TextTokenInput) -> Prompt:
    ids = inp.inp_tensor[0]
    kept = torch.ones_like(ids, dtype=torch.bool)
    if inp.itp_mask is not None:
        kept = inp.itp_mask[0]
    feature_of = torch.where(kept, kept.long().cumsum(0) - 1, -1)
    _check_features(feature_of)
    return Prompt(ids, feature_of, inp.n_itp_features, list(inp.values), inp)


def _template_prompt(inp: TextTemplateInput, tokenizer: Any) -> Prompt:
    text = inp.to_model_input()
    segment_spans = _template_spans(inp, text)
    encoded = tokenizer(text, return_offsets_mapping=True)
    segment = _owner(encoded["offset_mapping"], segment_spans)
    if inp.mask is not None:
        groups = torch.tensor(inp.formatted_mask + [-1])
        segment = groups[segment]  # -1 stays -1 (the appended entry)
    ids = torch.tensor(encoded["input_ids"])
    _check_features(segment)
    return Prompt(ids, segment, inp.n_itp_features, list(inp.values), inp)


def _template_spans(inp: TextTemplateInput, text: str) -> List[Span]:
    r"""Character span of each value in the completed text, found by completing
    the template with unique markers (so a template may repeat or reorder its
    values, or be a function)."""
    markers = [f"\ue000{i}\ue001" for i in range(len(inp.values))]
    marked = (
        inp.format_fn(**dict(zip(inp.dict_keys, markers)))
        if inp.dict_keys
        else inp.format_fn(*markers)
    )
    spans: List[Span] = [(0, 0)] * len(markers)
    rebuilt, cursor = "", 0
    while True:
        start = marked.find("\ue000", cursor)
        if start < 0:
            rebuilt += marked[cursor:]
            break
        end = marked.index("\ue001", start)
        index = int(marked[start + 1 : end])
        rebuilt += marked[cursor:start]
        spans[index] = (len(rebuilt), len(rebuilt) + len(inp.values[index]))
        rebuilt += inp.values[index]
        cursor = end + 1
    if rebuilt != text:
        raise ValueError(
            "TextTemplateInput's template changes its values instead of inserting "
            "them, so its tokens cannot be mapped to the segments"
        )
    return spans


def _chat_prompt(messages: Sequence[Mapping[str, Any]], tokenizer: Any) -> Prompt:
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "chat prompts need a tokenizer with a chat template "
            "(tokenizer.chat_template)"
        )
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=True
    )
    spans, cursor = [], 0
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            raise ValueError(f"chat message content must be a string: {message!r}")
        start = text.find(content, cursor)
        if start < 0:
            raise ValueError(
                "the chat template changes a message's content, so its tokens "
                f"cannot be found: {content!r}"
            )
        spans.append((start, start + len(content)))
        cursor = start + len(content)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    in_content = _owner(encoded["offset_mapping"], spans) >= 0
    feature_of = torch.where(in_content, in_content.long().cumsum(0) - 1, -1)
    ids = torch.tensor(encoded["input_ids"])
    _check_features(feature_of)
    names = tokenizer.convert_ids_to_tokens(ids[in_content].tolist())
    return Prompt(ids, feature_of, len(names), names, None)


def _owner(offsets: Sequence[Span], spans: Sequence[Span]) -> Tensor:
    r"""``[tokens]``: the span each token overlaps most (ties: the first), -1 for
    a token outside every span (special tokens have empty offsets)."""
    owners = []
    for start, end in offsets:
        overlaps = [max(0, min(end, e) - max(start, s)) for s, e in spans]
        best = max(overlaps, default=0)
        owners.append(overlaps.index(best) if best > 0 else -1)
    return torch.tensor(owners, dtype=torch.long)


def _check_features(feature_of: Tensor) -> None:
    if not bool((feature_of >= 0).any()):
        raise ValueError(
            "empty prompt: no token of it can be attributed (it is empty or made "
            "only of special / skipped tokens)"
        )
