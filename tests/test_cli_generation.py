#!/usr/bin/env python3
r"""``captum-ext explain-generation`` on a tiny random GPT-2 saved with its tiny
tokenizer: what it prints and writes equals the Python call, and every bad case
ends in one line on stderr."""

import pytest
import torch
from captum_ext.cli import main
from captum_ext.evaluation.explain_generation import explain_generation
from captum_ext.visualization import generation_text

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import one_line_error, save_tiny_model, tiny_causal_lm

PROMPT = "the cat sat on a mat"


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_lm")
    tiny_causal_lm("gpt2").save_pretrained(directory)
    tiny_lm_tokenizer().save_pretrained(directory)
    return directory


def test_prints_the_python_calls_report(lm_dir, capsys):
    argv = ["explain-generation", PROMPT, "--model", str(lm_dir)]
    argv += ["--methods", "LogAt", "FeatureAblation", "--max-new-tokens", "3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    model = tiny_causal_lm("gpt2")
    expected = explain_generation(
        model, tiny_lm_tokenizer(), PROMPT, ["LogAt", "FeatureAblation"], None, 3
    )
    assert out == generation_text(expected) + "\n"
    assert out.startswith(f"prompt: {PROMPT}\ngenerated: ")
    assert len(expected.target_tokens) == 3
    for scores in expected.scores.values():
        assert scores.shape == (3, len(expected.prompt_tokens))  # <s> + 6 words


def test_given_target_and_escaped_html_heatmaps(lm_dir, tmp_path, capsys):
    page = tmp_path / "new" / "generation.html"
    argv = ["explain-generation", "<b>the</b> cat", "--model", str(lm_dir)]
    argv += ["--target", "it was big", "--methods", "AttCAT", "Random"]
    assert main(argv + ["--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "given: it was big" in out and f"wrote {page}" in out
    html = page.read_text(encoding="utf-8")
    assert "<b>the</b>" not in html and "&lt;b&gt;the&lt;/b&gt;" in html
    assert html.count("<h2>") == 2 and html.count("<table>") == 2
    # One row per target token, one cell per prompt token (<s> + 2 words).
    assert html.count("<tr><th>was</th>") == 2
    assert html.split("<tr><th>was</th>")[1].split("</tr>")[0].count("<td") == 3


def test_a_chat_prompt_goes_through_the_template(lm_dir, capsys):
    argv = ["explain-generation", "the cat", "--model", str(lm_dir), "--chat"]
    assert main(argv + ["--target", "blue", "--methods", "LogAt"]) == 0
    explanation = explain_generation(
        tiny_causal_lm("gpt2"), tiny_lm_tokenizer(), "the cat", ["LogAt"], "blue"
    )
    chat = explain_generation(
        tiny_causal_lm("gpt2"),
        tiny_lm_tokenizer(),
        "the cat",
        ["LogAt"],
        "blue",
        chat=True,
    )
    assert chat.prompt_tokens == ["<|user|>", "the", "cat", "<|assistant|>"]
    assert chat.special_mask == [True, False, False, True]
    assert explanation.prompt_tokens == ["<s>", "the", "cat"]
    assert not torch.equal(chat.scores["LogAt"][:, 1:3], explanation.scores["LogAt"])


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--methods", "Saliency"], "unknown method for generated text"),
        (["--methods", "Nope"], "unknown method for generated text"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["--target", " "], "the target is empty"),
        (["--target", "a", "--max-new-tokens", "2"], "not allowed with argument"),
    ],
)
def test_bad_options_end_in_one_line(lm_dir, capsys, extra, expected):
    argv = ["explain-generation", PROMPT, "--model", str(lm_dir), *extra]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    one_line_error(capsys, code, expected)


@pytest.mark.parametrize("prompt", ["", "   "])
def test_an_empty_prompt_is_refused(lm_dir, capsys, prompt):
    code = main(["explain-generation", prompt, "--model", str(lm_dir)])
    one_line_error(capsys, code, "the prompt is empty")


def test_a_classifier_is_refused(tmp_path, capsys):
    save_tiny_model(tmp_path)
    code = main(["explain-generation", PROMPT, "--model", str(tmp_path)])
    one_line_error(capsys, code, "not a causal LM")


def test_an_unwritable_html_path_fails_before_any_work(lm_dir, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["explain-generation", PROMPT, "--model", str(tmp_path / "missing")]
    code = main(argv + ["--html", str(blocker / "page.html")])
    one_line_error(capsys, code, "cannot write to")
