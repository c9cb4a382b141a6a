#!/usr/bin/env python3
import io
import math
import re

import pytest
import torch
from captum.attr import visualization as captum_viz
from captum_ext.metrics._utils.ranking import no_signal
from captum_ext.visualization import (
    ansi_tokens,
    display_texts,
    Explanation,
    explanation_html,
    explanation_text,
    fit_line,
    generation_html,
    generation_text,
    GenerationExplanation,
    HEATMAP_COLUMNS,
    html_page,
    html_tokens,
    NO_POSITIVE_EVIDENCE,
    normalize,
    notebook_html,
    positioned_texts,
    special_token_mask,
    supports_color,
    to_records,
    visualization_records,
    word_groups,
)
from transformers import BertTokenizer

HOSTILE = ["[CLS]", "<script>", "alert(1)", "</script>", "&", "##amp", "[SEP]"]
HOSTILE_SPECIAL = [True, False, False, False, False, False, True]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "it", "is", "hope"]
VOCAB += ["##less", "##ly", "bad", "."]


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
        special_mask=list(HOSTILE_SPECIAL),
    )


@pytest.fixture
def tokenizer():
    return BertTokenizer(vocab={token: i for i, token in enumerate(VOCAB)})


def test_normalize_scales_by_peak_magnitude_and_keeps_signs():
    out = normalize(torch.tensor([2.0, -4.0, 1.0]))
    assert torch.allclose(out, torch.tensor([0.5, -1.0, 0.25]))


def test_normalize_maps_zero_and_non_finite_scores_to_zero():
    assert normalize(torch.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    out = normalize(torch.tensor([float("nan"), float("inf"), 1.0]))
    assert out.tolist() == [0.0, 0.0, 1.0]


def test_normalize_scales_over_real_tokens_only():
    # AttCAT-like: [CLS] 20x any word; words must still reach +-1.
    scores = torch.tensor([20.0, 0.5, -1.0, 0.25, 3.0])
    out = normalize(scores, [True, False, False, False, True])
    assert out.tolist() == [20.0, 0.5, -1.0, 0.25, 3.0]
    # Only specials: scaled among themselves rather than dividing by zero.
    assert normalize(torch.tensor([2.0, -4.0]), [True, True]).tolist() == [0.5, -1.0]


def test_special_mask_length_is_checked():
    with pytest.raises(ValueError, match="one flag per token"):
        normalize(torch.ones(3), [True])
    with pytest.raises(ValueError, match="one flag per token"):
        Explanation(["a"], {}, [], 0, 1.0, 0, special_mask=[True, False])


@pytest.mark.parametrize(
    "tokens, words",
    [
        # WordPiece marks continuations.
        (
            ["[CLS]", "hope", "##less", "##ly", "bad", ".", "[SEP]"],
            [[0], [1, 2, 3], [4], [5], [6]],
        ),
        # SentencePiece marks word starts; "." glues to the word before it.
        (
            ["<s>", "▁hope", "less", "ly", "▁bad", ".", "</s>"],
            [[0], [1, 2, 3], [4, 5], [6]],
        ),
        # GPT-2 byte-level BPE: the first word has no marker.
        (["<s>", "hope", "less", "ly", "Ġbad", "</s>"], [[0], [1, 2, 3], [4], [5]]),
    ],
)
def test_word_groups_follow_each_tokenizer_convention(tokens, words):
    specials = [t in ("[CLS]", "[SEP]", "<s>", "</s>") for t in tokens]
    assert word_groups(tokens, specials) == words


@pytest.mark.parametrize(
    "tokens, texts",
    [
        (
            ["[CLS]", "hope", "##less", "##ly", "łódź", "[SEP]"],
            ["[CLS]", "hope", "less", "ly", "łódź", "[SEP]"],
        ),
        (
            ["<s>", "▁It", "’", "s", "▁żółw", "</s>"],
            ["<s>", "It", "’", "s", "żółw", "</s>"],
        ),
        # Byte-level BPE: "’" is three bytes, "Ċ" a newline, "Ġ" a space.
        (
            ["<s>", "It", "âĢĻ", "s", "Ġgre", "at", "Ċ", "</s>"],
            ["<s>", "It", "’", "s", "gre", "at", "⏎", "</s>"],
        ),
    ],
)
def test_display_texts_read_as_the_words_they_spell(tokens, texts):
    specials = [t in ("[CLS]", "[SEP]", "<s>", "</s>") for t in tokens]
    assert display_texts(tokens, specials) == texts


def test_special_tokens_are_words_of_their_own():
    assert word_groups(["[CLS]", "##x", "##y"], [True, False, False]) == [[0], [1, 2]]


def test_html_tokens_joins_pieces_and_keeps_each_piece_coloured():
    tokens = ["[CLS]", "hope", "##less", "##ly", "bad", "[SEP]"]
    scores = torch.tensor([30.0, 1.0, 0.5, -0.25, -1.0, 5.0])
    out = html_tokens(tokens, scores, [True, False, False, False, False, True])
    assert (
        '<span class="word"><mark class="tok" style="background-color: '
        'rgba(0, 170, 0, 1.00)" title="+1.000">hope</mark><mark class="tok" '
        'style="background-color: rgba(0, 170, 0, 0.50)" title="+0.500">less</mark>'
        '<mark class="tok" style="background-color: rgba(220, 30, 30, 0.25)" '
        'title="-0.250">ly</mark></span>'
    ) in out
    assert 'rgba(220, 30, 30, 1.00)" title="-1.000">bad<' in out
    # Specials: greyed, no background, their value (30x the peak) in the tooltip.
    assert (
        '<mark class="tok special" title="special token, +30.000 on this row\'s '
        'scale (not coloured)">[CLS]</mark>'
    ) in out


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


def test_explanation_html_shows_the_explanations_own_text():
    explanation = _explanation()
    explanation.text = "a <caption>"
    assert explanation_html(explanation).startswith("<p>a &lt;caption&gt;</p>")


def test_html_page_is_self_contained_and_escapes_title():
    page = html_page("<script>x</script>", "<p>body</p>")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page
    assert "<style>" in page and "http" not in page.lower()


def test_visualization_records_are_whole_words_scaled_over_real_words():
    explanation = _explanation()
    records = visualization_records(explanation)
    assert len(records) == 2
    first = records[0]
    assert isinstance(first, captum_viz.VisualizationDataRecord)
    # "&" + "##amp" is one word, escaped once.
    assert first.raw_input_ids == [
        "[CLS]",
        "&lt;script&gt;",
        "alert(1)",
        "&lt;/script&gt;",
        "&amp;amp",
        "[SEP]",
    ]
    # Word scores: piece sums (0.5 + 0.2) scaled by the real peak 2.0; specials 0.
    expected = torch.tensor([0.0, 1.0, -0.5, 0.0, 0.35, 0.0])
    assert torch.allclose(first.word_attributions, expected)
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


def test_special_token_mask_uses_the_tokenizers_ids_but_scores_unk(tokenizer):
    ids = tokenizer("it is hopeless zzz")["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids)[-2] == "[UNK]"
    assert special_token_mask(tokenizer, ids) == [True] + [False] * 5 + [True]


def test_to_records_builds_one_record_per_example_from_plain_tensors(tokenizer):
    batch = tokenizer(["it is hopeless", "bad"], padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    scores = torch.tensor(
        [[9.0, 1.0, 1.0, 2.0, 2.0, 9.0], [9.0, -4.0, 9.0, 7.0, 7.0, 7.0]]
    )
    logits = torch.tensor([[0.0, 2.0], [1.0, 0.0]])
    records = to_records(
        tokenizer,
        ids,
        scores,
        attention_mask=mask,
        logits=logits,
        label_names=["neg", "pos"],
        method="AttCAT",
    )
    assert len(records) == 2
    first, second = records
    assert first.raw_input_ids == ["[CLS]", "it", "is", "hopeless", "[SEP]"]
    assert first.word_attributions.tolist() == [0.0, 0.25, 0.25, 1.0, 0.0]
    assert first.pred_class == "pos" and first.attr_class == "AttCAT: pos"
    assert first.pred_prob == pytest.approx(float(logits[0].softmax(-1)[1]))
    assert first.true_class == "?"
    # The pads of the second row are dropped.
    assert second.raw_input_ids == ["[CLS]", "bad", "[SEP]"]
    assert second.word_attributions.tolist() == [0.0, -1.0, 0.0]
    assert second.pred_class == "neg"


def test_to_records_without_logits_leaves_the_prediction_unknown(tokenizer):
    ids = tokenizer(["bad"], return_tensors="pt")["input_ids"]
    (record,) = to_records(tokenizer, ids, torch.ones(ids.shape))
    assert record.pred_class == "?" and math.isnan(record.pred_prob)
    html = captum_viz.visualize_text([record]).data
    assert "bad" in html


def test_to_records_checks_shapes(tokenizer):
    with pytest.raises(ValueError, match="same \\[batch, seq\\] shape"):
        to_records(tokenizer, torch.ones(1, 3, dtype=torch.long), torch.ones(1, 4))


def test_ansi_tokens_without_color_shows_scores_and_no_escape_codes():
    out = ansi_tokens(
        ["[CLS]", "great", "##ly", "bad"], torch.tensor([0, 2, 1, -2]), False
    )
    assert "\x1b[" not in out
    assert out == "[CLS][+0.00] great[+1.00]ly[+0.50] bad[-1.00]"


def test_ansi_tokens_scale_over_real_tokens_and_leave_specials_unscored():
    tokens = ["[CLS]", "great", "##ly", "bad", "[SEP]"]
    scores = torch.tensor([40.0, 2.0, 1.0, -2.0, 9.0])
    specials = [True, False, False, False, True]
    out = ansi_tokens(tokens, scores, False, specials)
    assert out == "[CLS] great[+1.00]ly[+0.50] bad[-1.00] [SEP]"
    coloured = ansi_tokens(tokens, scores, True, specials)
    assert coloured.startswith("\x1b[2m[CLS]\x1b[0m \x1b[30;48;5;46mgreat\x1b[0m")


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
    assert "[CLS] (" not in out  # specials never in the top list


def test_explanation_text_sanitises_class_and_method_names():
    explanation = _explanation()
    explanation.label_names = ["\x1b[31mneg", "\x1b]0;title\x07pos"]
    explanation.scores = {"\x1b[2JM": torch.ones(len(HOSTILE))}
    out = explanation_text(explanation, color=False)
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[31mneg" in out and "\\x07pos" in out  # visible escapes


def test_control_and_bidi_characters_are_shown_as_visible_escapes():
    explanation = _explanation()
    explanation.label_names = ["neg\u202egnp.exe", "pos\x00\x07"]
    page = explanation_html(explanation, text="evil\u202etxt.exe \x1b[2J\u2066x")
    for raw in ("\u202e", "\x00", "\x07", "\x1b", "\u2066"):
        assert raw not in page
    for shown in ("neg\\u202egnp.exe", "pos\\x00\\x07", "evil\\u202etxt.exe"):
        assert shown in page
    assert "\\x1b[2J\\u2066x" in page


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


@pytest.mark.integration
def test_default_model_attcat_row_is_visible_and_words_are_joined(sentiment_model):
    from captum_ext.attr import AttCAT

    model, tokenizer = sentiment_model
    batch = tokenizer(["A hopelessly monotonous gimmick."], return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    scores = AttCAT(model).attribute(ids, additional_forward_args=(mask,))
    tokens = tokenizer.convert_ids_to_tokens(ids[0])
    specials = special_token_mask(tokenizer, ids[0].tolist())
    words = word_groups(tokens, specials)
    joined = [
        "".join(t.replace("##", "") for t in (tokens[i] for i in g)) for g in words
    ]
    assert joined == ["[CLS]", "a", "hopelessly", "monotonous", "gimmick", ".", "[SEP]"]
    out = html_tokens(tokens, scores[0], specials)
    assert out.count('class="tok special"') == 2
    alphas = [float(a) for a in re.findall(r"rgba\([\d, ]+, ([\d.]+)\)", out)]
    assert len(alphas) == len(tokens) - 2 and max(alphas) == 1.0


def test_an_explanation_repr_is_a_few_terminal_safe_lines():
    explanation = _explanation()
    explanation.label_names[1] = "pos\x1b[31m" + "x" * 120  # escape, very long
    lines = repr(explanation).splitlines()
    assert len(lines) == 3 and all(len(line) <= 100 for line in lines)
    assert "\x1b" not in "".join(lines) and lines[0].endswith("…")
    assert lines[1].split("top: ")[1].startswith("<script> (+1.00)")
    assert lines[2].split("top: ")[1].startswith("alert(1) (+0.33)")


def test_an_explanation_shows_its_highlights_in_a_notebook():
    page = _explanation()._repr_html_()
    assert page == notebook_html(explanation_html(_explanation()))
    assert "<script" not in page and "&lt;b&gt;Odd&lt;/b&gt;" in page
    assert "body {" not in page and ".captum-ext span.word" in page


def test_fit_line_cuts_at_the_width():
    assert fit_line("a" * 100) == "a" * 100
    assert fit_line("a" * 101) == "a" * 99 + "…"


def test_a_generation_explanation_shows_itself():
    explanation = GenerationExplanation(
        prompt_tokens=["<s>", "the", "<b>cat</b>"] + ["w"] * 40,
        target_tokens=["sat", "on", "\x1b[31m"],
        scores={
            "AttCAT": torch.arange(129.0).reshape(3, 43),
            "LogAt": -torch.ones(3, 43),
        },
        prompt="the <b>cat</b>",
        continuation="sat on",
        generated=True,
        special_mask=[True] + [False] * 42,
    )
    lines = repr(explanation).splitlines()
    assert lines[0] == "prompt: the <b>cat</b>" and lines[1] == "generated: sat on"
    assert len(lines) <= 13 and all(len(line) <= 100 for line in lines)
    assert "\x1b" not in repr(explanation)
    page = explanation._repr_html_()
    assert "<b>cat" not in page and "&lt;b&gt;cat&lt;/b&gt;" in page
    assert page.count("<table") == 2  # one heatmap per method


def test_top_lists_hold_positive_evidence_only():
    explanation = Explanation(
        tokens=["[CLS]", "it", "is", "it", "[SEP]"],
        scores={
            "Flat": torch.zeros(5),
            "Mixed": torch.tensor([9.0, -1.0, 0.001, 2.0, 0.0]),  # "is" reads +0.00
        },
        label_names=["neg", "pos"],
        pred_class=1,
        pred_prob=0.9,
        target=1,
        special_mask=[True, False, False, False, True],
    )
    out = explanation_text(explanation, color=False).splitlines()
    top = [line.split("top: ")[1] for line in out if "top: " in line]
    # No zero-score token is "top"; the repeated "it" says which one.
    assert top == [NO_POSITIVE_EVIDENCE, "it@3 (+1.00)"]
    assert "top: no positive evidence" in repr(explanation)


def test_generation_text_names_positions_of_repeated_tokens():
    explanation = GenerationExplanation(
        prompt_tokens=["<s>", "k1", "v2", "k1"],
        target_tokens=["v2", "v9"],
        scores={"M": torch.tensor([[0.0, 151.0, -3.0, 193.0], [0.0, 0.0, 0.0, 0.0]])},
        prompt="k1 v2 k1",
        continuation="v2 v9",
        generated=True,
        special_mask=[True, False, False, False],
    )
    lines = generation_text(explanation).splitlines()
    assert lines[-2] == "  v2  k1@3 (+193), k1@1 (+151)"
    assert lines[-1] == f"  v9  {NO_POSITIVE_EVIDENCE}"
    assert positioned_texts(["a", "b", "a"]) == ["a@0", "b", "a@2"]


def _heatmap_cells(html: str):
    return re.findall(r'<td class="num( evidence)?"[^>]*>([^<]*)</td>', html)


def test_heatmaps_wrap_scale_without_the_predicting_column_and_mark_evidence():
    prompt = ["<s>"] + [f"w{i}" for i in range(39)]  # 40 columns: 3 bands
    scores = torch.zeros(2, 40)
    scores[:, 5] = torch.tensor([0.5, 1.0])
    scores[:, -1] = -4.0  # the predicting position: outside the scale
    explanation = GenerationExplanation(
        prompt_tokens=prompt,
        target_tokens=["a", "b"],
        scores={"M": scores},
        prompt="p",
        continuation="a b",
        generated=False,
        special_mask=[True] + [False] * 39,
        evidence=[5, -1],
    )
    html = generation_html(explanation, heading=4)
    assert html.count("<h4>M</h4>") == 1 and "<h2>" not in html
    assert html.count("<tr><th></th>") == -(-40 // HEATMAP_COLUMNS)
    cells = _heatmap_cells(html)
    assert len(cells) == 2 * 39  # every real prompt token once per target row
    assert cells.count((" evidence", "+0.50")) == 1  # row a's evidence, outlined
    assert ("", "+1.00") in cells and cells.count(("", "-4.00")) == 2
    assert "black outline marks the prompt token known to decide" in html
    # Only the predicting position scored: it sets the scale itself.
    alone = torch.zeros(2, 40)
    alone[:, -1] = -4.0
    flat = GenerationExplanation(
        prompt, ["a", "b"], {"M": alone}, "p", "a b", False, [True] + [False] * 39
    )
    assert _heatmap_cells(generation_html(flat)).count(("", "-1.00")) == 2


def test_a_method_without_signal_says_so_over_its_heatmap():
    explanation = GenerationExplanation(
        ["<s>", "a", "b"],
        ["c"],
        {"Flat": torch.tensor([[5.0, 0.0, 0.0]]), "M": torch.tensor([[0.0, 1.0, 2.0]])},
        "a b",
        "c",
        True,
        [True, False, False],
    )
    html = generation_html(explanation)
    assert html.count("no signal: every prompt token scored the same") == 1
    assert html.index("no signal") < html.index("<h2>M")
    assert html.count('<th class="predicting"') == 2  # "b", once per method


def test_no_signal_note_is_the_engines_test_one_real_token_ranks_nothing():
    r"""The note over a heatmap is :func:`no_signal` on that one example: a
    prompt with one real token has nothing to tie, so it is never flagged,
    as the benchmark's ``no_signal`` count does not count it."""
    one_real = GenerationExplanation(
        ["<s>", "a"],
        ["b", "c"],
        {"M": torch.tensor([[3.0, 1.0], [0.0, 2.0]])},
        "a",
        "b c",
        True,
        [True, False],
    )
    assert "no signal" not in generation_html(one_real)
    assert not no_signal(one_real.scores["M"][None], torch.tensor([[0, 1]])).item()
