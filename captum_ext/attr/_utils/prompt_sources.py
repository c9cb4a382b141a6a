#!/usr/bin/env python3
r"""A prompt's sources, sentences or lines, as Captum's ``TextTemplateInput``
(its values are the sources, in order, and its template puts them back
together), so that :class:`~captum_ext.attr.LLMTokenAttribution` gives one column
per source: the sum of the scores of the tokens inside it.

The rule is deliberately simple and needs no sentence-splitting package:

- ``"lines"``: a source ends after each line break (``"\n"``);
- ``"sentences"``: a source ends after ``.``, ``!`` or ``?`` (a run of them,
  with any closing quotes or brackets right after) when whitespace follows, and
  after each line break. So ``"3.14"`` and ``"a.b"`` stay whole, while an
  abbreviation followed by a space (``"e.g. this"``) ends a sentence.

The whitespace after a source belongs to it, and a source made only of
whitespace (a blank line) joins the one before it (the first source keeps the
text's leading whitespace), so the sources cover the prompt's text exactly and
every token of it, but the tokenizer's own special tokens (BOS), falls in one
source: the one its characters overlap most (a token that straddles two
sources goes to the larger part)."""

import re
from typing import Dict, List, Pattern

from captum.attr import TextTemplateInput

__all__ = ["SOURCE_KINDS", "prompt_sources", "split_sources"]

# Where each kind of source ends (the rule of the module docstring).
_ENDS: Dict[str, Pattern[str]] = {
    "sentences": re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+|\n\s*"),
    "lines": re.compile(r"\n"),
}
SOURCE_KINDS = tuple(_ENDS)


def split_sources(text: str, kind: str) -> List[str]:
    r"""The sources of ``text`` (``kind`` ``"sentences"`` or ``"lines"``, see the
    module docstring), in order: ``"".join(split_sources(text, kind)) == text``.
    Raises ``ValueError`` for another kind or a text without a non-blank
    character."""
    if kind not in _ENDS:
        raise ValueError(
            f"sources must be one of {', '.join(SOURCE_KINDS)} (tokens need no "
            f"split), got {kind!r}"
        )
    if not text.strip():
        raise ValueError("the prompt is empty: it has no source to score")
    return _join_blank(_cut(text, _ENDS[kind]))


def _cut(text: str, end: Pattern[str]) -> List[str]:
    cuts = [match.end() for match in end.finditer(text)]
    bounds = [0, *(c for c in cuts if 0 < c < len(text)), len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def _join_blank(pieces: List[str]) -> List[str]:
    r"""Whitespace-only pieces join the source before them (leading ones the
    first source)."""
    sources: List[str] = []
    lead = ""
    for piece in pieces:
        if piece.strip():
            sources.append(lead + piece)
            lead = ""
        elif sources:
            sources[-1] += piece
        else:
            lead += piece
    return sources


def prompt_sources(text: str, kind: str) -> TextTemplateInput:
    r"""``text`` as Captum's ``TextTemplateInput`` whose values are its sources
    (:func:`split_sources`): given to
    :class:`~captum_ext.attr.LLMTokenAttribution`, each column of the result is
    a source and its score the sum of its tokens' scores; the model reads
    ``text`` itself, tokenised as a plain prompt.

    Args:
        text (str): the prompt.
        kind (str): ``"sentences"`` or ``"lines"``.

    Returns:
        TextTemplateInput: template ``"{}" * n_sources``, values the sources.

    Examples::

        >>> llm_attr = LLMTokenAttribution(AttCAT(model), tokenizer)
        >>> result = llm_attr.attribute(prompt_sources(document, "sentences"),
        ...                             target="Paris")
        >>> result.seq_attr  # one score per sentence of the document
    """
    sources = split_sources(text, kind)
    return TextTemplateInput("{}" * len(sources), values=sources)
