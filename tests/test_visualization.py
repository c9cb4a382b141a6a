#!/usr/bin/env python3
import io
import math

import pytest
import torch
from captum.attr import visualization as captum_viz
from captum_ext.visualization import (
    ansi_tokens,
    Explanation,
    explanation_html,
    explanation_text,
    html_page,
    html_tokens,
    normalize,
    supports_color,
    visualization_records,
)

HOSTILE = ["[CLS]", "<script>", "alert(1)", "</script>", "&", "##amp", "[SEP]"]


def _explanation() -> Explanation:
    return Explanation(
        tokens=list(HOSTILE),
        scores={
            "NormXLogit": torch.tensor([0.1, 2.0, -1.0, 0.0, 0.5, 0.2, 0.0]),
            "<b>Odd</b>": torch.tensor([0.0, -3.0, 1.0, 0.0, 0.0, 0.0, 0.3]),
        },
        label_names=["neg", "<pos>&"],
        pred_class=1,
        pred_prob=0.875,
        target=1,
        true_class=0,
    )


def test_normalize_scales_by_peak_magnitude_and_keeps_signs():
    out = normalize(torch.tensor([2.0, -4.0, 1.0]))
    assert torch.allclose(out, torch.tensor([0.5, -1.0, 0.25]))


def test_normalize_maps_zero_and_non_finite_scores_to_zero():
    assert normalize(torch.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    out = normalize(torch.tensor([float("nan"), float("inf"), 1.0]))
    assert out.tolist() == [0.0, 0.0, 1.0]


def test_html_tokens_escapes_every_token():
    out = html_tokens(HOSTILE, torch.ones(len(HOSTILE)))
    assert "<script>" not in out and "</script>" not in out
    assert "&lt;script&gt;" in out and "&lt;/script&gt;" in out
    assert "&amp;" in out  # the bare "&" token
    assert out.count("<mark") == len(HOSTILE)


def test_explanation_html_escapes_tokens_method_names_labels_and_text():
    out = explanation_html(_explanation(), text="<script>alert(1)</script> & co")
    assert "<script" not in out and "<b>Odd" not in out and "<pos>" not in out
    assert "&lt;b&gt;Odd&lt;/b&gt;" in out and "&lt;pos&gt;&amp;" in out
    assert "true class <b>neg</b>; prediction: <b>&lt;pos&gt;&amp;</b>" in out


def test_html_page_is_self_contained_and_escapes_title():
    page = html_page("<script>x</script>", "<p>body</p>")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert "<style>" in page and "http" not in page.lower()


def test_visualization_records_fields():
    explanation = _explanation()
    records = visualization_records(explanation)
    assert len(records) == 2
    first = records[0]
    assert isinstance(first, captum_viz.VisualizationDataRecord)
    assert first.raw_input_ids[1] == "&lt;script&gt;"
    assert first.raw_input_ids[4] == "&amp;"
    assert len(first.raw_input_ids) == len(first.word_attributions) == len(HOSTILE)
    assert float(first.word_attributions.abs().max()) == 1.0
    assert first.attr_score == pytest.approx(1.8)
    assert first.pred_prob == 0.875
    assert first.pred_class == "&lt;pos&gt;&amp;"
    assert first.true_class == "neg"
    assert first.attr_class == "NormXLogit: &lt;pos&gt;&amp;"
    assert records[1].attr_class.startswith("&lt;b&gt;Odd")
    assert math.isnan(first.convergence_score)


def test_captum_visualize_text_renders_records_without_injected_markup():
    html = captum_viz.visualize_text(visualization_records(_explanation())).data
    assert "<script" not in html and "</script" not in html and "<b>Odd" not in html
    assert "&lt;script&gt;" in html


def test_ansi_tokens_without_color_shows_scores_and_no_escape_codes():
    out = ansi_tokens(
        ["[CLS]", "great", "##ly", "bad"], torch.tensor([0, 2, 1, -2]), False
    )
    assert "\x1b[" not in out
    assert out == "[CLS][+0.00] great[+1.00]ly[+0.50] bad[-1.00]"


def test_ansi_tokens_with_color_uses_green_for_positive_red_for_negative():
    out = ansi_tokens(["good", "bad", "meh"], torch.tensor([1.0, -1.0, 0.0]), True)
    assert "\x1b[30;48;5;46mgood\x1b[0m" in out
    assert "\x1b[30;48;5;196mbad\x1b[0m" in out
    assert out.endswith(" meh")


def test_explanation_text_lists_every_method_and_the_prediction():
    out = explanation_text(_explanation(), color=False)
    assert "prediction: <pos>& (p=0.875)" in out
    assert "true class: neg" in out
    for name in _explanation().scores:
        assert name in out
    assert "top: <script> (+1.00)" in out


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_supports_color_only_on_a_tty_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert supports_color(_Stream(tty=True))
    assert not supports_color(_Stream(tty=False))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not supports_color(_Stream(tty=True))
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not supports_color(_Stream(tty=True))


def test_ansi_tokens_cannot_emit_terminal_escapes_from_tokens():
    out = ansi_tokens(["\x1b[2Jx"], torch.tensor([1.0]), False)
    assert "\x1b" not in out
