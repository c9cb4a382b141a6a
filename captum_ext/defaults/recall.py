#!/usr/bin/env python3
r"""Key–value recall: a synthetic generation task with planted evidence.

A prompt lists ``N`` key–value pairs and ends with a query key; the continuation
is the queried key's values::

    prompt:        k3 v7 v1 ; k1 v2 v9 ; k9 v5 v4 ; k1
    continuation:  v2 v9

So the ``t``-th continuation token is determined by one known prompt token: the
``t``-th value of the queried pair, its *evidence* (the same token, copied). An
explanation of ``y_t`` is right when it puts its top score there; the queried
pair's key (``k1 v2 v9``) is recorded too, since a model must find it to know
where to copy from. Each value directly follows the token before it in its pair,
so recall is copying what followed the previous token's earlier occurrence (the
lookup of an induction head, which a 2-layer model learns quickly). Formats with
a separator between key and values (``k1 = v2 v9``, queried by ``k1 ->`` or
``k1 =``) need a match two positions back for the first value, and the same
small model stayed below 30 % first-value accuracy after 3,000 steps (measured).

What varies, all from one seed: the number of pairs (``min_pairs`` ..
``max_pairs``), which pair is queried, and the values. Every pair draws its values
from the same uniform distribution, independently of the others, so values
recur across pairs: the token being predicted often also stands at positions
that are not its evidence (distractors: a method that merely highlights copies
of the target token is not rewarded). Planting extra copies of the queried
values would leak the answer (the most frequent value would be it: a model
trained so learned to count instead of to look up), so none are planted. Keys
are distinct within a prompt and the values of one pair are distinct, so the
answer and its evidence are unique.

The vocabulary is one word per token: the special tokens, ``k0 ..``, ``v0 ..``
and ``;``. :func:`recall_tokenizer` builds a Hugging Face fast
tokenizer for it (a ``tokenizers`` WordLevel model on whitespace-split words)
that, like Llama's, starts every encoded text with ``<bos>``.
"""

import random
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Protocol, Sequence, Tuple, TYPE_CHECKING

import torch
from torch import Tensor

from captum_ext._utils.teacher_forcing import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "RecallBatch",
    "RecallExample",
    "RecallTask",
    "encode_examples",
    "recall_tokenizer",
]

# <unk> has id 0, so Captum's FeatureAblation on a TextTokenInput (baseline id 0)
# replaces a token by "unknown".
UNK, PAD, BOS, EOS = "<unk>", "<pad>", "<bos>", "<eos>"
SPECIAL_TOKENS = (UNK, PAD, BOS, EOS)
SEPARATOR = ";"


@dataclass(frozen=True)
class RecallExample:
    r"""One prompt, its continuation and where the continuation's evidence is.

    Positions count the prompt's whitespace-separated words from 0 (the
    tokenizer's ``<bos>`` is not a word; :func:`encode_examples` maps words to
    token positions). ``needed[t]`` is the set of prompt words the ``t``-th
    continuation token needs: for recall the queried pair's key (where to
    look) and the value (what to copy). The query key that ends the prompt is
    needed too, but it is the input of the position that predicts the first
    value, which several methods score first for reasons of their own
    (issue 30), so the set holds only what a model must find. Other tasks with
    planted evidence (:mod:`captum_ext.defaults.flags`) use the same record,
    with no single-token ``evidence`` and ``key_position`` -1 where they have
    none."""

    prompt: str
    continuation: str  # the queried values, space-separated (no end token)
    evidence: Tuple[int, ...]  # word position of the t-th queried value
    key_position: int  # word position of the queried pair's key
    needed: Tuple[Tuple[int, ...], ...] = ()  # word positions y_t needs


@dataclass(frozen=True)
class RecallTask:
    r"""The distribution prompts are drawn from.

    Args:
        n_keys (int): size of the key vocabulary ``k0 ..``.
        n_values (int): size of the value vocabulary ``v0 ..``.
        min_pairs (int): fewest key–value pairs in a prompt (at least 1).
        max_pairs (int): most pairs (at most ``n_keys`` when every key is
            distinct).
        values_per_key (int): values per pair, the continuation's length.
        unique_keys (int, optional): None: every pair's key is distinct. ``u``:
            ``u`` pairs have keys of their own, the queried one among them; the
            others draw theirs, repeats allowed, from the keys left, so a
            prompt can hold hundreds of distractor pairs over a small key
            vocabulary (the long-context variant). Default: None.
    """

    n_keys: int = 32
    n_values: int = 32
    min_pairs: int = 2
    max_pairs: int = 8
    values_per_key: int = 2
    unique_keys: Optional[int] = None

    def __post_init__(self) -> None:
        most = self.n_keys if self.unique_keys is None else self.max_pairs
        if not 1 <= self.min_pairs <= self.max_pairs <= most:
            raise ValueError(
                "need 1 <= min_pairs <= max_pairs <= n_keys, got "
                f"{self.min_pairs}, {self.max_pairs}, {self.n_keys}"
            )
        if self.unique_keys is not None and not (
            1 <= self.unique_keys <= self.min_pairs and self.unique_keys < self.n_keys
        ):
            raise ValueError(
                "need 1 <= unique_keys <= min_pairs and unique_keys < n_keys, got "
                f"{self.unique_keys}, {self.min_pairs}, {self.n_keys}"
            )
        if not 1 <= self.values_per_key <= self.n_values:
            raise ValueError(
                f"need 1 <= values_per_key <= n_values, got {self.values_per_key}, "
                f"{self.n_values}"
            )

    @property
    def keys(self) -> List[str]:
        return [f"k{i}" for i in range(self.n_keys)]

    @property
    def values(self) -> List[str]:
        return [f"v{i}" for i in range(self.n_values)]

    def vocabulary(self) -> List[str]:
        r"""Every token, in id order: the specials first (``<unk>`` = 0)."""
        return list(SPECIAL_TOKENS) + [SEPARATOR] + self.keys + self.values

    def sample(self, n: int, seed: int) -> List[RecallExample]:
        r"""``n`` examples drawn with ``random.Random(seed)``: the same seed
        gives the same examples on every machine and Python version."""
        rng = random.Random(seed)
        return [self._example(rng) for _ in range(n)]

    def _example(self, rng: random.Random) -> RecallExample:
        n_pairs = rng.randint(self.min_pairs, self.max_pairs)
        keys, queried = self._keys(rng, n_pairs)
        answer = rng.sample(self.values, self.values_per_key)  # distinct values
        words: List[str] = []
        evidence: Tuple[int, ...] = ()
        key_position = -1
        for index, key in enumerate(keys):
            if index == queried:
                pair_values = answer
                key_position = len(words)
                evidence = tuple(len(words) + 1 + t for t in range(len(answer)))
            else:
                pair_values = rng.sample(self.values, self.values_per_key)
            words += [key, *pair_values, SEPARATOR]
        words.append(keys[queried])
        needed = tuple((key_position, position) for position in evidence)
        prompt, continuation = " ".join(words), " ".join(answer)
        return RecallExample(prompt, continuation, evidence, key_position, needed)

    def _keys(self, rng: random.Random, n_pairs: int) -> Tuple[List[str], int]:
        r"""Each pair's key and the queried pair's index."""
        if self.unique_keys is None:
            return rng.sample(self.keys, n_pairs), rng.randrange(n_pairs)
        own = rng.sample(self.keys, self.unique_keys)
        rest = [key for key in self.keys if key not in own]
        keys = own + [rng.choice(rest) for _ in range(n_pairs - len(own))]
        rng.shuffle(keys)
        return keys, keys.index(rng.choice(own))

    def training_row(
        self, example: RecallExample, extra_queries: int, rng: random.Random
    ) -> Tuple[List[str], List[bool]]:
        r"""``(words, labelled)``: ``<bos>``, the prompt, its continuation and
        ``<eos>``, then up to ``extra_queries`` more queries of the same
        prompt's other keys that occur once, drawn with ``rng``, with their
        values and
        ``<eos>`` (``k9 v5 v4 <eos>``). Only answers and ``<eos>`` are labelled
        (the prompts are random). The first query is exactly an evaluation
        example; the extra ones give several answers per sequence, which trains
        recall several times faster per second (as multi-query associative
        recall does)."""
        pairs = [p.split() for p in example.prompt.split(f" {SEPARATOR} ")[:-1]]
        counts = Counter(words[0] for words in pairs)
        answers = {words[0]: words[1:] for words in pairs if counts[words[0]] == 1}
        queried = example.prompt.split()[-1]
        others = [key for key in answers if key != queried]
        keys = [queried] + rng.sample(others, min(extra_queries, len(others)))
        words = [BOS] + example.prompt.split()[:-1]
        labelled = [False] * len(words)
        for key in keys:
            words += [key, *answers[key], EOS]
            labelled += [False] + [True] * (len(answers[key]) + 1)
        return words, labelled

    def longest_row(self, extra_queries: int) -> int:
        r"""Tokens of the longest :meth:`training_row`."""
        query = 2 + self.values_per_key  # key, values, <eos>
        return (
            1 + (2 + self.values_per_key) * self.max_pairs + (1 + extra_queries) * query
        )

    def longest_prompt(self) -> int:
        r"""Tokens of the longest prompt, ``<bos>`` included."""
        return 2 + (2 + self.values_per_key) * self.max_pairs


class _Words(Protocol):
    def vocabulary(self) -> List[str]: ...


def recall_tokenizer(task: _Words) -> "PreTrainedTokenizerFast":
    r"""A Hugging Face fast tokenizer for ``task``'s words (a
    :class:`RecallTask`, or any task with a ``vocabulary()``): one token per
    whitespace-separated word (``<unk>`` for unknown words), ``<bos>`` in front of
    every encoded text (as Llama's tokenizers do), ``<eos>``/``<pad>`` declared,
    prompts padded on the left (as ``generate()`` wants them). Saved and loaded
    with ``save_pretrained``/``AutoTokenizer.from_pretrained``."""
    from tokenizers import models, pre_tokenizers, processors, Tokenizer
    from transformers import PreTrainedTokenizerFast

    vocabulary: Dict[str, int] = {w: i for i, w in enumerate(task.vocabulary())}
    backend = Tokenizer(models.WordLevel(vocabulary, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A $B",
        special_tokens=[(BOS, vocabulary[BOS])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=UNK,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="left",
    )


@dataclass(frozen=True)
class RecallBatch:
    r"""Examples as tensors in the teacher-forcing layout
    (:mod:`captum_ext._utils.teacher_forcing`)."""

    input_ids: Tensor  # [batch, P]: prompts with <bos>, left-padded
    attention_mask: Tensor  # [batch, P]
    target: Tensor  # [batch, T]: the continuation's ids, IGNORE_INDEX after it
    evidence: Tensor  # [batch, T]: prompt position of y_t's evidence, or -1
    key_position: Tensor  # [batch]: prompt position of the queried pair's key, or -1
    needed: Tensor  # [batch, T, S]: prompt positions y_t needs, -1 after them


def encode_examples(
    examples: Sequence[RecallExample],
    tokenizer: "PreTrainedTokenizerFast",
    end_token: bool = False,
) -> RecallBatch:
    r"""Tokenizes ``examples`` into a :class:`RecallBatch`.

    Args:
        examples (Sequence[RecallExample]): from :meth:`RecallTask.sample`.
        tokenizer (PreTrainedTokenizerFast): :func:`recall_tokenizer`'s (or the
            default generator's).
        end_token (bool, optional): append ``<eos>`` to every continuation; its
            evidence is -1 (no single prompt token decides where a value list
            ends). Default: False.

    Returns:
        RecallBatch: evidence positions index the padded prompt, so
        ``input_ids[b, evidence[b, t]] == target[b, t]`` wherever
        ``evidence[b, t] >= 0``; so do ``needed`` and ``key_position``.
    """
    if not examples:
        raise ValueError("no examples to encode")
    prompts = tokenizer([e.prompt for e in examples], padding=True, return_tensors="pt")
    continuations = [
        tokenizer(e.continuation, add_special_tokens=False)["input_ids"]
        + ([tokenizer.eos_token_id] if end_token else [])
        for e in examples
    ]
    steps = max(len(c) for c in continuations)
    target = torch.full((len(examples), steps), IGNORE_INDEX, dtype=torch.long)
    evidence = torch.full_like(target, -1)
    key_position = torch.full((len(examples),), -1, dtype=torch.long)
    widest = max((len(s) for e in examples for s in e.needed), default=0)
    needed = torch.full((len(examples), steps, widest), -1, dtype=torch.long)
    for row, (example, continuation) in enumerate(zip(examples, continuations)):
        target[row, : len(continuation)] = torch.tensor(continuation)
        # word index -> token position (after <bos> and the left padding)
        position = {w: p for p, w in enumerate(prompts.word_ids(row)) if w is not None}
        position[-1] = -1
        for t, words in enumerate(example.needed):
            needed[row, t, : len(words)] = torch.tensor([position[w] for w in words])
        evidence[row, : len(example.evidence)] = torch.tensor(
            [position[w] for w in example.evidence], dtype=torch.long
        )
        key_position[row] = position[example.key_position]
    return RecallBatch(
        prompts["input_ids"],
        prompts["attention_mask"],
        target,
        evidence,
        key_position,
        needed,
    )
