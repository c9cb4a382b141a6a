#!/usr/bin/env python3
r"""Prompt sources (sentences, lines): the splitting rule, the sources covering
the text exactly, LLMTokenAttribution's source columns equal to the sums of its
token columns, and the metrics' ranking of tokens scored by source."""

import pytest
import torch
from captum_ext.attr import AttCAT, LLMTokenAttribution, LogAt, prompt_sources
from captum_ext.attr._utils.llm_prompts import prepare_prompt
from captum_ext.attr._utils.prompt_sources import SOURCE_KINDS, split_sources
from captum_ext.evaluation.names import SOURCE_NAMES
from captum_ext.metrics._utils.ranking import descending_order
from hypothesis import given, strategies as st

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import tiny_causal_lm


@pytest.mark.parametrize(
    "text, kind, expected",
    [
        ("One. Two! Three?", "sentences", ["One. ", "Two! ", "Three?"]),
        # A number and a dotted word stay whole; closing quotes stay with
        # their sentence; an abbreviation before a space ends one (the rule).
        (
            'Pi is 3.14. "Yes." a.b e.g. c',
            "sentences",
            ["Pi is 3.14. ", '"Yes." ', "a.b e.g. ", "c"],
        ),
        # Line breaks end sentences; blank lines and leading space join.
        (
            "  Title\n\nBody one. Body two\n",
            "sentences",
            ["  Title\n\n", "Body one. ", "Body two\n"],
        ),
        ("a\n\nb\nc", "lines", ["a\n\n", "b\n", "c"]),
        ("no break at all", "lines", ["no break at all"]),
    ],
)
def test_splitting_rule(text, kind, expected) -> None:
    assert split_sources(text, kind) == expected


@given(st.text(alphabet="ab .!?\n\"'", min_size=1), st.sampled_from(SOURCE_KINDS))
def test_sources_cover_the_text_exactly(text, kind) -> None:
    if not text.strip():
        with pytest.raises(ValueError, match="empty"):
            split_sources(text, kind)
        return
    sources = split_sources(text, kind)
    assert "".join(sources) == text
    assert all(source.strip() for source in sources)


def test_unknown_kind_and_the_command_line_names() -> None:
    with pytest.raises(ValueError, match="sentences, lines"):
        split_sources("a. b", "words")
    assert SOURCE_NAMES == ("tokens", *SOURCE_KINDS)


@pytest.mark.parametrize("method", [LogAt, AttCAT])
@pytest.mark.parametrize("kind", SOURCE_KINDS)
def test_source_columns_sum_the_token_columns(method, kind) -> None:
    r"""The word-level tokenizer gives one token per word after <s>, so source
    ``k`` holds the next ``len(sources[k].split())`` token columns."""
    text = "the cat sat on a mat . it was big .\nwhat is the colour of sky ?"
    model, tokenizer = tiny_causal_lm("gpt2", dtype=torch.float64), tiny_lm_tokenizer()
    llm_attr = LLMTokenAttribution(method(model), tokenizer)
    tokens = llm_attr.attribute(text, target="blue red", skip_tokens=[1])
    grouped = llm_attr.attribute(prompt_sources(text, kind), target="blue red")
    sources = split_sources(text, kind)
    assert grouped.input_tokens == sources
    bounds = torch.tensor([0] + [len(s.split()) for s in sources]).cumsum(0)
    expected = torch.stack(
        [tokens.token_attr[:, a:b].sum(1) for a, b in zip(bounds, bounds[1:])], 1
    )
    assert len(sources) == (3 if kind == "sentences" else 2)
    torch.testing.assert_close(grouped.token_attr, expected, rtol=1e-12, atol=0)


def test_tokens_scored_by_source_rank_whole_sources_together() -> None:
    r"""docs/generation.rst: every token given its source's score, the
    metrics' ranking removes whole sources, the highest first."""
    text = "a dog ran . the cat sat on a mat .\nblue"
    prompt = prepare_prompt(prompt_sources(text, "sentences"), tiny_lm_tokenizer())
    source_scores = torch.tensor([0.5, 2.0, -1.0])
    kept = prompt.feature_of >= 0  # all but <s>
    tokens = torch.where(kept, source_scores[prompt.feature_of.clamp(min=0)], 0.0)
    order = descending_order(tokens[None], kept[None])[0, : int(kept.sum())]
    assert prompt.feature_of[order].tolist() == [1] * 7 + [0] * 4 + [2]
