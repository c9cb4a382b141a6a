#!/usr/bin/env python3
r"""Flag sum: a synthetic generation task whose answer copies no prompt token.

A prompt is a row of filler words with two flags planted at random places; it
ends with the query token ``?``. The continuation is one label, decided by the
two flags together, ``a`` of the sum of their numbers modulo the number of
flags::

    prompt:        w3 w9 f2 w1 w7 w7 f1 w4 ?
    continuation:  a3                            (2 + 1 = 3)

The labels never stand in the prompt, so an explanation cannot find the
evidence by matching the predicted token (what a copy detector does on
key–value recall, :mod:`captum_ext.defaults.recall`); both flags are needed:
the two numbers are drawn independently and uniformly, so either flag alone
leaves every label equally likely. The evidence of the label is the *set* of
the two flags' positions; no single prompt token decides it.

The vocabulary is one word per token: the special tokens, ``?``, ``w0 ..``,
``f0 ..`` and ``a0 ..``; :func:`captum_ext.defaults.recall.recall_tokenizer`
builds its tokenizer (from :meth:`FlagTask.vocabulary`).
"""

import random
from dataclasses import dataclass
from typing import List, Tuple

from captum_ext.defaults.recall import BOS, EOS, RecallExample, SPECIAL_TOKENS

__all__ = ["FlagTask", "QUERY"]

QUERY = "?"


@dataclass(frozen=True)
class FlagTask:
    r"""The distribution flag-sum prompts are drawn from.

    Args:
        n_fillers (int): size of the filler vocabulary ``w0 ..``.
        n_flags (int): number of flags ``f0 ..`` and of labels ``a0 ..``.
        min_words (int): fewest prompt words before ``?``, the flags included
            (at least 2).
        max_words (int): most prompt words before ``?``.
    """

    n_fillers: int = 32
    n_flags: int = 4
    min_words: int = 8
    max_words: int = 32

    def __post_init__(self) -> None:
        if not 2 <= self.min_words <= self.max_words:
            raise ValueError(
                "need 2 <= min_words <= max_words, got "
                f"{self.min_words}, {self.max_words}"
            )
        if self.n_fillers < 1 or self.n_flags < 2:
            raise ValueError(
                f"need n_fillers >= 1 and n_flags >= 2, got {self.n_fillers}, "
                f"{self.n_flags}"
            )

    def vocabulary(self) -> List[str]:
        r"""Every token, in id order: the specials first (``<unk>`` = 0)."""
        fillers = [f"w{i}" for i in range(self.n_fillers)]
        flags = [f"f{i}" for i in range(self.n_flags)]
        labels = [f"a{i}" for i in range(self.n_flags)]
        return list(SPECIAL_TOKENS) + [QUERY] + fillers + flags + labels

    def sample(self, n: int, seed: int) -> List[RecallExample]:
        r"""``n`` examples drawn with ``random.Random(seed)``; each one's
        ``evidence`` is empty (no single token decides the label),
        ``key_position`` is -1 and ``needed`` holds the two flags' word
        positions."""
        rng = random.Random(seed)
        return [self._example(rng) for _ in range(n)]

    def _example(self, rng: random.Random) -> RecallExample:
        length = rng.randint(self.min_words, self.max_words)
        words = [f"w{rng.randrange(self.n_fillers)}" for _ in range(length)]
        places = sorted(rng.sample(range(length), 2))
        numbers = [rng.randrange(self.n_flags) for _ in places]
        for place, number in zip(places, numbers):
            words[place] = f"f{number}"
        label = f"a{sum(numbers) % self.n_flags}"
        prompt = " ".join(words + [QUERY])
        return RecallExample(prompt, label, (), -1, (tuple(places),))

    def training_row(
        self, example: RecallExample, extra_queries: int, rng: random.Random
    ) -> Tuple[List[str], List[bool]]:
        r"""``(words, labelled)``: ``<bos>``, the prompt, its label and
        ``<eos>``, only the last two labelled. A prompt has one answer, so
        ``extra_queries`` and ``rng`` are unused (they serve
        :meth:`~captum_ext.defaults.recall.RecallTask.training_row`)."""
        words = [BOS] + example.prompt.split() + [example.continuation, EOS]
        return words, [False] * (len(words) - 2) + [True, True]

    def longest_row(self, extra_queries: int) -> int:
        r"""Tokens of the longest training row: ``<bos>``, prompt, label,
        ``<eos>``."""
        return 1 + self.max_words + 1 + 2

    def longest_prompt(self) -> int:
        r"""Tokens of the longest prompt, ``<bos>`` included."""
        return 1 + self.max_words + 1
