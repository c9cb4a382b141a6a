#!/usr/bin/env python3
r"""Prompts of :class:`~captum_ext.attr.LLMTokenAttribution`: token ids, and which
interpretable feature (a column of Captum's ``LLMAttributionResult``) each token
belongs to.

- Captum's ``TextTokenInput``: its own ids (``tokenizer.encode``, BOS included
  where the tokenizer adds one); every token is a feature but its
  ``skip_tokens``.
- A plain string: ``TextTokenInput(text, tokenizer, skip_tokens=skip_tokens)``.
- Captum's ``TextTemplateInput``: the completed text, tokenised as Captum does
  (``tokenizer.encode``); a token belongs to the value whose occurrence its
  characters overlap most (a value written twice owns the tokens of both
  occurrences, as Captum's perturbation replaces both), grouped by the input's
  ``mask``; tokens of the template's own text belong to no feature, and an
  empty value has none (a zero column).
- ``skip_tokens`` (ids, or tokens as Captum converts them): a plain string's
  or a chat's tokens of those ids get no column. For Captum's inputs it is
  ignored, as Captum's ``LLMAttribution`` ignores it (the input's own
  arguments decide its columns), with a warning when it names a token that
  keeps a column.
- A chat (a list of ``{"role", "content"}`` messages): the text of
  ``tokenizer.apply_chat_template(..., add_generation_prompt=True)``, tokenised
  without adding special tokens (the template writes its own); the tokens inside
  a message's content are the features, the template's tokens (role markers,
  BOS, separators) are special: the model reads them, they get no column. Each
  content is located by rendering the template again with a unique marker as
  the content (never by searching its text, which may also be a role name or
  part of a special token); a content the template rewrites, drops or repeats,
  or a token joining a content with template text, is refused.

Every prompt must hold a feature token that is not one of the tokenizer's
special tokens (``all_special_ids``), and no lone surrogate character.
"""

import warnings
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from captum.attr import TextTemplateInput, TextTokenInput
from captum.attr._utils.interpretable_input import InterpretableInput
from torch import Tensor

__all__ = ["Prompt", "check_text", "is_chat", "prepare_prompt"]

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
    prompt = _prompt(inp, tokenizer, chat, skip_tokens)
    # Special = what the tokenizer declares special (BOS, EOS, role markers,
    # ...), not only the ids the model's config names.
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
    if bool(torch.isin(prompt.ids[prompt.feature_of >= 0], special).all()):
        raise ValueError(
            "empty prompt: its tokens are all special tokens of the tokenizer "
            f"({', '.join(tokenizer.convert_ids_to_tokens(prompt.ids.tolist()))}); "
            "there is nothing to attribute"
        )
    return prompt


def _prompt(
    inp: Any,
    tokenizer: Any,
    chat: bool,
    skip_tokens: Optional[Union[List[int], List[str]]],
) -> Prompt:
    if isinstance(inp, str) and chat:
        inp = [{"role": "user", "content": inp}]
    if is_chat(inp):
        return _skipping(_chat_prompt(inp, tokenizer), _ids(tokenizer, skip_tokens))
    if isinstance(inp, str):
        check_text(inp, "the prompt")
        inp = TextTokenInput(inp, tokenizer, skip_tokens=skip_tokens)
        return _token_prompt(inp)
    if isinstance(inp, TextTokenInput):
        prompt = _token_prompt(inp)
    elif isinstance(inp, TextTemplateInput):
        prompt = _template_prompt(inp, tokenizer)
    else:
        raise TypeError(
            "a prompt is a string, Captum's TextTokenInput or TextTemplateInput, "
            f"or a chat (a list of {{'role', 'content'}} dicts); got "
            f"{type(inp).__name__}"
        )
    _warn_ignored_skip_tokens(prompt, tokenizer, skip_tokens)
    return prompt


def _ids(tokenizer: Any, tokens: Optional[Union[List[int], List[str]]]) -> Tensor:
    r"""``[k]`` ids of ``skip_tokens`` given as ids or tokens (Captum's rule:
    tokens when the first is a string)."""
    given: List[Any] = list(tokens or [])
    if given and isinstance(given[0], str):
        given = tokenizer.convert_tokens_to_ids(given)
    return torch.tensor(given, dtype=torch.long)


def _skipping(prompt: Prompt, skipped: Tensor) -> Prompt:
    r"""A chat ``prompt`` whose tokens of ``skipped`` ids get no column."""
    kept = (prompt.feature_of >= 0) & ~torch.isin(prompt.ids, skipped)
    feature_of = torch.where(kept, kept.long().cumsum(0) - 1, -1)
    _check_features(feature_of)
    names = [n for n, k in zip(prompt.names, kept[prompt.feature_of >= 0]) if k]
    return Prompt(prompt.ids, feature_of, len(names), names, None)


def _warn_ignored_skip_tokens(
    prompt: Prompt, tokenizer: Any, skip_tokens: Optional[Union[List[int], List[str]]]
) -> None:
    r"""Captum's ``LLMAttribution`` ignores ``attribute(..., skip_tokens=...)``
    for its inputs (their own arguments decide the columns), and so does this
    prompt: a warning when that keeps a column of a token ``skip_tokens`` names."""
    named = torch.isin(prompt.ids, _ids(tokenizer, skip_tokens))
    kept = prompt.ids[named & (prompt.feature_of >= 0)]
    if not len(kept):
        return  # the input already skips them: the keyword changes nothing
    how = (
        "build TextTokenInput(text, tokenizer, skip_tokens=...)"
        if isinstance(prompt.inp, TextTokenInput)
        else "write them into the template's text instead of a value"
    )
    warnings.warn(
        f"attribute(skip_tokens=...) is ignored for a {type(prompt.inp).__name__}, "
        "as Captum's LLMAttribution ignores it: the input's own arguments decide "
        f"its columns, so {tokenizer.convert_ids_to_tokens(kept.tolist())} keep "
        f"theirs; to leave them out, {how}"
    )


def _token_prompt(inp: TextTokenInput) -> Prompt:
    ids = inp.inp_tensor[0]
    kept = torch.ones_like(ids, dtype=torch.bool)
    if inp.itp_mask is not None:
        kept = inp.itp_mask[0]
    feature_of = torch.where(kept, kept.long().cumsum(0) - 1, -1)
    _check_features(feature_of)
    return Prompt(ids, feature_of, inp.n_itp_features, list(inp.values), inp)


def check_text(text: str, name: str) -> None:
    r"""Raises ``ValueError`` naming ``name`` when ``text`` holds a lone
    surrogate (U+D800 to U+DFFF), which no tokenizer can encode (e.g. a
    byte the shell could not decode, kept by Python as ``\udcXX``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{name} holds the lone surrogate {text[error.start]!r} at character "
            f"{error.start}, which is not text (UTF-8 cannot encode it); decode "
            "its source as UTF-8 (errors='replace') or remove it"
        ) from None


def _template_prompt(inp: TextTemplateInput, tokenizer: Any) -> Prompt:
    text = inp.to_model_input()
    check_text(text, "the completed template")
    spans, value_of = _template_spans(inp, text)
    encoded = tokenizer(text, return_offsets_mapping=True)
    # The value of each token's span (every occurrence of a value is its own
    # span); -1 (the appended entry) for a token outside every span.
    segment = torch.tensor(value_of + [-1])[_owner(encoded["offset_mapping"], spans)]
    if inp.mask is not None:
        groups = torch.tensor(inp.formatted_mask + [-1])
        segment = groups[segment]  # -1 stays -1 (the appended entry)
    ids = torch.tensor(encoded["input_ids"])
    _check_features(segment)
    return Prompt(ids, segment, inp.n_itp_features, list(inp.values), inp)


# Private-use code points: markers that no template writes by itself.
_OPEN, _CLOSE = "\ue000", "\ue001"


def _template_spans(inp: TextTemplateInput, text: str) -> Tuple[List[Span], List[int]]:
    r"""Character spans of every occurrence of every value in the completed
    text, and the value of each span, found by completing the template with
    unique markers (so a template may repeat or reorder its values, or be a
    function). An empty value is passed as itself, not as a marker: it has no
    characters, and a template function may drop its slot (Captum's tutorial's
    ``prompt_fn`` does)."""
    markers = [_marker(i) if value else "" for i, value in enumerate(inp.values)]
    marked = (
        inp.format_fn(**dict(zip(inp.dict_keys, markers)))
        if inp.dict_keys
        else inp.format_fn(*markers)
    )
    filled = _fill_markers(marked, inp.values)
    if filled is None or filled[0] != text:
        raise ValueError(
            "TextTemplateInput's template changes its values instead of inserting "
            "them, so its tokens cannot be mapped to the segments"
        )
    occurrences = [(span, i) for i, found in enumerate(filled[1]) for span in found]
    return [span for span, _ in occurrences], [i for _, i in occurrences]


def _marker(index: int) -> str:
    return f"{_OPEN}{index}{_CLOSE}"


def _fill_markers(
    marked: str, values: Sequence[str]
) -> Optional[Tuple[str, List[List[Span]]]]:
    r"""``marked`` with every marker replaced by its value, and the character
    spans where each value landed (one per occurrence); None when a marker was
    cut or altered (the text around it then cannot be trusted)."""
    if any(_OPEN in value or _CLOSE in value for value in values):
        raise ValueError(
            "a prompt's text contains U+E000 or U+E001, the private-use "
            "characters that locate it in the template; remove them"
        )
    found: List[List[Span]] = [[] for _ in values]
    rebuilt, cursor = "", 0
    while True:
        start = marked.find(_OPEN, cursor)
        if start < 0:
            break
        end = marked.find(_CLOSE, start)
        index = marked[start + 1 : end] if end > start else ""
        if not index.isdigit() or int(index) >= len(values):
            return None
        rebuilt += marked[cursor:start]
        value = values[int(index)]
        found[int(index)].append((len(rebuilt), len(rebuilt) + len(value)))
        rebuilt += value
        cursor = end + 1
    rest = marked[cursor:]
    if _CLOSE in rest:
        return None
    return rebuilt + rest, found


def _chat_prompt(messages: Sequence[Mapping[str, Any]], tokenizer: Any) -> Prompt:
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "chat prompts need a tokenizer with a chat template "
            "(tokenizer.chat_template)"
        )
    contents: List[str] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            raise ValueError(f"chat message content must be a string: {message!r}")
        check_text(content, f"the content of chat message {len(contents)}")
        contents.append(content)
    text = _render(tokenizer, messages)
    spans = _chat_spans(tokenizer, messages, contents, text)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = torch.tensor(encoded["input_ids"])
    in_content = _content_tokens(text, encoded["offset_mapping"], spans, tokenizer, ids)
    feature_of = torch.where(in_content, in_content.long().cumsum(0) - 1, -1)
    _check_features(feature_of)
    names = tokenizer.convert_ids_to_tokens(ids[in_content].tolist())
    return Prompt(ids, feature_of, len(names), names, None)


def _render(tokenizer: Any, messages: Sequence[Mapping[str, Any]]) -> str:
    text: str = tokenizer.apply_chat_template(
        [dict(message) for message in messages],
        tokenize=False,
        add_generation_prompt=True,
    )
    return text


def _chat_spans(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    contents: List[str],
    text: str,
) -> List[Span]:
    r"""Character span of each message's content in the rendered ``text``: the
    template is rendered a second time with a unique marker as each content,
    never searched for the content's text (which may also be a role name or
    part of a special token's text)."""
    marked = _render(
        tokenizer,
        [{**message, "content": _marker(i)} for i, message in enumerate(messages)],
    )
    filled = _fill_markers(marked, contents)
    if filled is None or filled[0] != text:
        raise ValueError(
            "the chat template changes a message's content (it trims, cuts or "
            "rewrites it) or depends on its text, so the content's tokens cannot "
            "be located exactly; give contents the template writes unchanged "
            "(e.g. without leading or trailing whitespace)"
        )
    for index, found in enumerate(filled[1]):
        if len(found) != 1:
            raise ValueError(
                f"the chat template writes the content of message {index} "
                f"{len(found)} times, not once, so its tokens cannot be located "
                "exactly"
            )
    return [found[0] for found in filled[1]]


def _content_tokens(
    text: str,
    offsets: Sequence[Span],
    spans: Sequence[Span],
    tokenizer: Any,
    ids: Tensor,
) -> Tensor:
    r"""Boolean ``[tokens]``: the token lies inside a message's content (its
    characters outside the content, if any, are whitespace the tokenizer
    attaches to a word). A token that joins a content with template text or
    with another content is refused: its score would belong to neither."""
    inside = []
    for position, (start, end) in enumerate(offsets):
        owners = [i for i, (s, e) in enumerate(spans) if min(end, e) > max(start, s)]
        if len(owners) == 1:
            s, e = spans[owners[0]]
            outside = text[start : max(start, s)] + text[min(end, e) : end]
            owners = owners if not outside.strip() else owners + [-1]
        if len(owners) > 1:
            token = tokenizer.convert_ids_to_tokens(int(ids[position]))
            raise ValueError(
                f"token {position} ({token!r}) joins the content of message "
                f"{owners[0]} with the chat template's text or another message, "
                "so the content cannot be located exactly in tokens; separate "
                "the content from the template's text (e.g. with a space)"
            )
        inside.append(len(owners) == 1)
    return torch.tensor(inside, dtype=torch.bool)


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
