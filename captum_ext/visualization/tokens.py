#!/usr/bin/env python3
r"""Tokens as the views show them: which are special (:func:`special_token_mask`),
each method's row scaled over the real tokens (:func:`normalize`), word pieces
joined into words (:func:`word_groups`, :func:`display_texts`) and repeated
tokens told apart (:func:`positioned_texts`). The rules are in the docstring of
:mod:`captum_ext.visualization`."""

from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import Tensor

__all__ = [
    "display_texts",
    "normalize",
    "positioned_texts",
    "special_token_mask",
    "word_groups",
]

# Word-start markers of SentencePiece and GPT-2 byte-level BPE.
_START_MARKERS = ("▁", "Ġ")
_CONTINUATION_MARKER = "##"  # WordPiece


def _mask_or_none(special_mask: Optional[Sequence[bool]], n: int) -> List[bool]:
    if special_mask is None:
        return [False] * n
    if len(special_mask) != n:
        raise ValueError(
            f"special_mask has {len(special_mask)} entries for {n} tokens; "
            "give one flag per token"
        )
    return [bool(flag) for flag in special_mask]


def special_token_mask(tokenizer: Any, input_ids: Sequence[int]) -> List[bool]:
    r"""``True`` where ``input_ids`` holds one of the tokenizer's special tokens
    (``tokenizer.all_special_ids``), except the unknown token: ``[UNK]`` stands
    for a real word of the input, so it is scored and coloured like one."""
    special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    return [int(token) in special for token in input_ids]


def normalize(scores: Tensor, special_mask: Optional[Sequence[bool]] = None) -> Tensor:
    r"""Scales ``scores`` by their largest magnitude over the non-special tokens
    (signs kept), so real tokens lie in ``[-1, 1]`` and special tokens may lie
    outside it. All-zero or non-finite scores map to zeros; when every token is
    special, the peak is taken over all of them."""
    scores = torch.nan_to_num(scores.detach().float().cpu(), 0.0, 0.0, 0.0)
    real = ~torch.tensor(_mask_or_none(special_mask, len(scores)), dtype=torch.bool)
    pool = scores[real] if bool(real.any()) else scores
    peak = pool.abs().max() if pool.numel() else torch.tensor(0.0)
    return scores / peak if peak > 0 else torch.zeros_like(scores)


def _word_start_marker(tokens: Sequence[str], specials: List[bool]) -> Optional[str]:
    r"""The row's tokenizer convention: a start marker in use on any real token
    means SentencePiece (``▁``) or byte-level BPE (``Ġ``), otherwise WordPiece
    (``None``)."""
    real = [t for t, s in zip(tokens, specials) if not s]
    return next((m for m in _START_MARKERS if any(t.startswith(m) for t in real)), None)


def _starts_word(token: str, marker: Optional[str]) -> bool:
    if marker is None:
        return not (
            token.startswith(_CONTINUATION_MARKER)
            and len(token) > len(_CONTINUATION_MARKER)
        )
    return token.startswith(marker)


def word_groups(
    tokens: Sequence[str], special_mask: Optional[Sequence[bool]] = None
) -> List[List[int]]:
    r"""Token indices grouped into words (see the module docstring for the
    markers); a special token is always a word of its own."""
    specials = _mask_or_none(special_mask, len(tokens))
    marker = _word_start_marker(tokens, specials)
    groups: List[List[int]] = []
    previous_special = True
    for index, (token, special) in enumerate(zip(tokens, specials)):
        if special or previous_special or _starts_word(token, marker):
            groups.append([index])
        else:
            groups[-1].append(index)
        previous_special = special
    return groups


def _byte_level_alphabet() -> Dict[str, int]:
    r"""GPT-2's byte-level BPE spells each byte as one printable character
    (bytes that are not printable Latin-1 are shifted to U+0100 and up, space
    becoming ``Ġ``); this maps the characters back to the bytes."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = [b for b in range(256) if b not in printable]
    alphabet = {chr(b): b for b in printable}
    alphabet.update({chr(256 + i): b for i, b in enumerate(shifted)})
    return alphabet


_BYTES = _byte_level_alphabet()


def _byte_level_text(token: str) -> str:
    if not all(c in _BYTES for c in token):
        return token
    text = bytes(_BYTES[c] for c in token).decode("utf-8", errors="replace")
    return text.lstrip(" ").replace("\n", "⏎") or "␣"


def display_texts(
    tokens: Sequence[str], special_mask: Optional[Sequence[bool]] = None
) -> List[str]:
    r"""Each token as it reads in its word: WordPiece ``##`` and SentencePiece
    ``▁`` stripped; byte-level BPE pieces decoded from their byte alphabet
    (``Ġ`` is a space, "âĢĻ" is "’"); special tokens unchanged."""
    specials = _mask_or_none(special_mask, len(tokens))
    marker = _word_start_marker(tokens, specials)
    texts = []
    for token, special in zip(tokens, specials):
        if special:
            texts.append(token)
        elif marker == "Ġ":
            texts.append(_byte_level_text(token))
        else:
            prefix = marker or _CONTINUATION_MARKER
            strip = token.startswith(prefix) and len(token) > len(prefix)
            texts.append(token[len(prefix) :] if strip else token)
    return texts


def positioned_texts(texts: Sequence[str]) -> List[str]:
    r"""Each text, with ``@position`` appended where the same text occurs more
    than once (``k1@3``), so a repeated token says which occurrence is meant."""
    counts: Dict[str, int] = {}
    for text in texts:
        counts[text] = counts.get(text, 0) + 1
    return [f"{t}@{i}" if counts[t] > 1 else t for i, t in enumerate(texts)]
