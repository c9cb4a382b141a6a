#!/usr/bin/env python3
r"""Tokenisation into length-bucketed, right-padded batches.

Padding costs every method time in proportion to the longest row, so examples
are sorted by token length before they are cut into batches; ``rows`` keeps
each example's position in the input so results can be put back in order.
"""

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import torch

from captum_ext._utils.token_batch import TokenBatch
from captum_ext.defaults.batching import length_sorted_batches

__all__ = ["EncodedBatch", "bucketed_batches", "texts_without_words"]


@dataclass(kw_only=True)
class EncodedBatch(TokenBatch):
    r"""One padded :class:`~captum_ext._utils.token_batch.TokenBatch` of a dataset.
    ``rows[i]`` is the input position of batch row ``i``; ``truncated[i]`` says
    whether that text was cut to ``max_length`` tokens."""

    rows: List[int]
    truncated: List[bool]


def _pad_id(tokenizer: Any) -> int:
    if tokenizer.pad_token_id is None:
        raise ValueError(
            "the tokenizer has no pad token, so examples cannot be batched; set "
            "tokenizer.pad_token (and the model's config.pad_token_id) first, e.g. "
            "to the eos token for a GPT-2 or Llama classifier"
        )
    return int(tokenizer.pad_token_id)


def bucketed_batches(
    tokenizer: Any,
    texts: Sequence[str],
    text_pairs: Optional[Sequence[str]] = None,
    *,
    batch_size: int,
    max_length: int,
) -> List[EncodedBatch]:
    r"""Tokenises ``texts`` (with ``text_pairs`` as second segments, if given) and
    cuts them into batches of similar length.

    Args:
        tokenizer (PreTrainedTokenizerBase): a Hugging Face tokenizer.
        texts (Sequence[str]): the inputs.
        text_pairs (Sequence[str], optional): second segments (NLI, paraphrase),
            tokenised as pairs with ``token_type_ids``.
        batch_size (int): examples per batch.
        max_length (int): tokens per example after truncation.

    Returns:
        list[EncodedBatch]: shortest batches first; the rows of all batches
        together are ``range(len(texts))``.
    """
    pad_id = _pad_id(tokenizer)
    ids, type_ids, truncated = _encode(tokenizer, texts, text_pairs, max_length)
    batches = []
    for rows in length_sorted_batches(
        range(len(ids)), lambda i: len(ids[i]), batch_size
    ):
        width = max(len(ids[i]) for i in rows)
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        types = None
        for row, i in enumerate(rows):
            input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
            mask[row, : len(ids[i])] = 1
        if type_ids is not None:
            types = torch.zeros_like(mask)
            for row, i in enumerate(rows):
                types[row, : len(ids[i])] = torch.tensor(type_ids[i])
        flags = [truncated[i] for i in rows]
        batches.append(
            EncodedBatch.of(input_ids, mask, types, rows=rows, truncated=flags)
        )
    return batches


def _encode(
    tokenizer: Any,
    texts: Sequence[str],
    text_pairs: Optional[Sequence[str]],
    max_length: int,
) -> Tuple[List[List[int]], Optional[List[List[int]]], List[bool]]:
    r"""Token ids (and type ids for pairs) cut to ``max_length``, and which
    examples were cut. Only the texts that are too long are tokenised twice."""
    pairs = None if text_pairs is None else list(text_pairs)
    # verbose=False: the callers say which texts were cut, instead of
    # transformers' "Token indices sequence length is longer than ..." line.
    encoded = tokenizer(list(texts), pairs, truncation=False, verbose=False)
    ids = list(encoded["input_ids"])
    type_ids = _type_ids(encoded) if pairs is not None else None
    long_rows = [i for i, row in enumerate(ids) if len(row) > max_length]
    if long_rows:
        cut = tokenizer(
            [texts[i] for i in long_rows],
            None if pairs is None else [pairs[i] for i in long_rows],
            truncation=True,
            max_length=max_length,
        )
        cut_types = _type_ids(cut)
        for position, i in enumerate(long_rows):
            ids[i] = cut["input_ids"][position]
            if type_ids is not None and cut_types is not None:
                type_ids[i] = cut_types[position]
    truncated = [False] * len(ids)
    for i in long_rows:
        truncated[i] = True
    return ids, type_ids, truncated


def _type_ids(encoded: Any) -> Optional[List[List[int]]]:
    # RoBERTa-like tokenizers mark pairs with separators only, no type ids
    type_ids = encoded.get("token_type_ids")
    return None if type_ids is None else list(type_ids)


def texts_without_words(
    tokenizer: Any, texts: Sequence[str], text_pairs: Optional[Sequence[str]] = None
) -> List[int]:
    r"""Positions of the texts that tokenise to special tokens only (a text of
    control characters, or of special-token strings such as ``"[SEP]"``):
    there is nothing in them to attribute."""
    pairs = None if text_pairs is None else list(text_pairs)
    encoded = tokenizer(list(texts), pairs, truncation=False, verbose=False)
    # An unknown word is still a word (the methods attribute it).
    special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    return [i for i, ids in enumerate(encoded["input_ids"]) if set(ids) <= special]
