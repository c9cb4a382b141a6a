#!/usr/bin/env python3
r"""Hostile text through the whole path: control characters, bidi overrides,
NUL, emoji, huge and empty texts, texts that are special-token strings. Each
is either attributed exactly as it is alone, or refused with a clear error
naming its row, and nothing raw reaches a terminal or a page."""

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from captum_ext.evaluation.attribute import attribute_dataset
from captum_ext.evaluation.explain import explain
from captum_ext.evaluation.registry import METHODS
from captum_ext.evaluation.user_data import DataError, load_data, LoadedExamples
from captum_ext.visualization import explanation_html, explanation_text

from tests.faults.faults import model, tokenizer

HOSTILE = [
    "good \x1b[31mfun\x1b[0m movie",  # ANSI escape
    "the movie\x07 was\x00 bad",  # BEL, NUL
    "fun \u202egood\u202c not bad",  # right-to-left override
    "\u2066the\u2069 plot \u200b\ufeff was fun",  # isolates, zero-width
    "good 😀 movie 👍🏽",  # emoji (unknown to the tiny vocabulary)
    " ".join(["not good"] * 3000),  # huge: cut to max_length
    "x",  # only an unknown word
]


def test_hostile_texts_are_attributed_as_each_alone(tmp_path: Path) -> None:
    data = LoadedExamples("hostile.csv", HOSTILE)
    out = attribute_dataset(
        model(), tokenizer(), data, ["NormXLogit"], tmp_path / "out",
        metrics=["aopc"], batch_size=3, progress=False,
    )  # fmt: skip
    table = pd.read_parquet(out)
    assert table["text"].tolist() == HOSTILE  # stored verbatim
    assert table["truncated"].tolist() == [False] * 5 + [True, False]
    explain_one = METHODS["NormXLogit"].factory(model(), tokenizer())
    for row, text in enumerate(HOSTILE):
        encoded = tokenizer()(text, truncation=True, max_length=10, return_tensors="pt")
        target = torch.tensor([int(table["predicted"][row])])
        alone = explain_one(encoded["input_ids"], encoded["attention_mask"], target)
        assert torch.allclose(torch.tensor(table["NormXLogit"][row]), alone[0])
    aopc = table["NormXLogit/AOPC"].tolist()
    assert math.isnan(aopc[-1]) and all(math.isfinite(v) for v in aopc[:-1])


@pytest.mark.parametrize("word", ["\x00\x07", "\u202e", "[SEP] [CLS]", "\u200b"])
def test_texts_without_a_word_are_refused_by_row(tmp_path: Path, word) -> None:
    data = LoadedExamples("hostile.csv", ["good movie", word, "fun"], rows=[10, 11, 12])
    with pytest.raises(DataError, match=r"row\(s\) 11 have no word"):
        attribute_dataset(
            model(), tokenizer(), data, ["NormXLogit"], tmp_path / "out",
            progress=False,
        )  # fmt: skip
    assert not (tmp_path / "out").exists()


def test_hostile_csv_cells_load_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "hostile.csv"
    pd.DataFrame({"text": HOSTILE[:5] + ["NA", ""]}).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"empty 'text' in row\(s\) 6"):
        load_data(path)
    pd.DataFrame({"text": HOSTILE[:5] + ["NA"]}).to_csv(path, index=False)
    assert load_data(path).texts == HOSTILE[:5] + ["NA"]


def test_explain_shows_hostile_text_as_visible_escapes() -> None:
    text = HOSTILE[0] + HOSTILE[2]
    explanation = explain(model(), tokenizer(), text, ["NormXLogit"])
    shown = explanation_text(explanation, color=False) + explanation_html(
        explanation, text=text
    )
    assert not any(raw in shown for raw in ("\x1b", "\u202e", "\u202c"))
    assert "\\x1b[31mfun" in shown and "\\u202egood\\u202c" in shown
