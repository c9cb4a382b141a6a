#!/usr/bin/env python3
r"""``captum-ext explain-generation`` and ``captum-ext benchmark --prompt-column``
on a tiny random GPT-2 saved with its tiny tokenizer (and, for the built-in
generator, an untrained tiny one in its place): what they print and write equals
the Python calls, and every bad case ends in one line on stderr."""

import json

import pytest
import torch
from captum_ext.cli import main
from captum_ext.evaluation.engine.causal_lm import run_generation_benchmark
from captum_ext.evaluation.explain_generation import explain_generation
from captum_ext.evaluation.options import GenerationBenchmarkOptions
from captum_ext.evaluation.user_data import load_data
from captum_ext.visualization import generation_text

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import (
    one_line_error,
    save_tiny_model,
    tiny_causal_lm,
    tiny_recall_generator,
    tiny_tokenizer,
)

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
    assert html.count("<h2>") == 2 and html.count('<table class="heatmap">') == 2
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


@pytest.mark.parametrize("kind", ["sentences", "lines"])
def test_sources_sum_the_token_scores(lm_dir, capsys, kind):
    prompt = "the cat sat . on a mat\nit was big ."
    argv = ["explain-generation", prompt, "--model", str(lm_dir), "--sources", kind]
    assert main(argv + ["--target", "blue", "--methods", "LogAt", "AttCAT"]) == 0
    model, tokenizer = tiny_causal_lm("gpt2"), tiny_lm_tokenizer()
    by_source = explain_generation(
        model, tokenizer, prompt, ["LogAt", "AttCAT"], "blue", sources=kind
    )
    assert capsys.readouterr().out == generation_text(by_source) + "\n"
    assert f"its top prompt {kind[:-1]}s" in generation_text(by_source)
    tokens = explain_generation(model, tokenizer, prompt, ["LogAt", "AttCAT"], "blue")
    # <s>, then one token per word: sentences of 4, 3 and 4 words; lines of 7, 4.
    sizes = [4, 3, 4] if kind == "sentences" else [7, 4]
    assert by_source.prompt_tokens == (
        ["the cat sat .", "on a mat", "it was big ."]
        if kind == "sentences"
        else ["the cat sat . on a mat", "it was big ."]
    )
    for name, scores in tokens.scores.items():
        expected = torch.stack(
            [part.sum(1) for part in scores[:, 1:].split(sizes, 1)], 1
        )
        torch.testing.assert_close(by_source.scores[name], expected)


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--methods", "Saliency"], "unknown method for generated text"),
        (["--methods", "Nope"], "unknown method for generated text"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["--target", " "], "the target is empty"),
        (["--target", "a", "--max-new-tokens", "2"], "not allowed with argument"),
        (["--chat", "--sources", "lines"], "--sources applies to a plain prompt"),
        (["--sources", "words"], "invalid choice: 'words'"),
        (["--max-new-tokens", "60"], "need 67 positions but the model has only 64"),
    ],
)
def test_bad_options_end_in_one_line(lm_dir, capsys, extra, expected):
    argv = ["explain-generation", PROMPT, "--model", str(lm_dir), *extra]
    code: object
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    one_line_error(capsys, code, expected)


@pytest.mark.parametrize("prompt", ["", "   "])
def test_an_empty_prompt_is_refused(lm_dir, capsys, prompt):
    code = main(["explain-generation", prompt, "--model", str(lm_dir)])
    one_line_error(capsys, code, "the prompt is empty")


def _larger_tokenizer(tokenizer, directory):
    tokenizer.add_tokens(["zebra"])  # one id past the model's vocabulary
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.parametrize("command", ["explain-generation", "attribute", "explain"])
def test_a_tokenizer_larger_than_the_model_is_refused(tmp_path, capsys, command):
    if command == "explain":
        model_dir = _larger_tokenizer(tiny_tokenizer(), save_tiny_model(tmp_path))
        argv = ["explain", PROMPT, "--model", str(model_dir)]
    else:
        tiny_causal_lm("gpt2").save_pretrained(tmp_path)
        model_dir = _larger_tokenizer(tiny_lm_tokenizer(), tmp_path)
        argv = ["explain-generation", PROMPT, "--model", str(model_dir)]
    if command == "attribute":
        data = tmp_path / "prompts.jsonl"
        data.write_text(json.dumps({"prompt": PROMPT}) + "\n")
        argv = ["attribute", "--model", str(model_dir), "--data", str(data)]
        argv += ["--prompt-column", "prompt", "--out", str(tmp_path / "out")]
    code = main(argv)
    one_line_error(capsys, code, "the tokenizer has 100 tokens but the model's voc")


def test_a_prompt_of_the_tokenizers_special_tokens_is_refused(lm_dir, capsys):
    code = main(["explain-generation", "<|user|> <|system|>", "--model", str(lm_dir)])
    one_line_error(capsys, code, "its tokens are all special tokens of the tokenizer")


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


def test_without_model_it_explains_the_default_generator(monkeypatch, capsys):
    from captum_ext.defaults import generator

    monkeypatch.setattr(
        generator, "load_default_generator", lambda device=None: tiny_recall_generator()
    )
    prompt = "k1 v2 v3 ; k4 v5 v6 ; k1"
    argv = ["explain-generation", prompt, "--target", "v2 v3", "--methods", "LogAt"]
    assert main(argv) == 0
    model, tokenizer = tiny_recall_generator()
    expected = explain_generation(model, tokenizer, prompt, ["LogAt"], "v2 v3")
    assert capsys.readouterr().out == generation_text(expected) + "\n"
    assert expected.prompt_tokens[0] == "<bos>" and len(expected.target_tokens) == 2


# ---------------------------------------------------------------- benchmark
@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.csv"
    path.write_text("prompt,answer\nthe cat sat on,a mat\na mat,the cat\non a,mat\n")
    return path


def test_benchmark_on_your_lm_equals_the_python_api(lm_dir, prompt_file, tmp_path):
    out = tmp_path / "out"
    argv = ["benchmark", "--model", str(lm_dir), "--data", str(prompt_file)]
    argv += ["--prompt-column", "prompt", "--target-column", "answer"]
    argv += ["--methods", "LogAt", "AttCAT", "Random", "--metrics", "aopc", "soft_ns"]
    assert main(argv + ["--out", str(out), "--no-progress", "--batch-size", "2"]) == 0
    written = json.loads((out / "results.json").read_text())
    model = tiny_causal_lm("gpt2", attn_implementation="sdpa")  # as --model loads it
    data = load_data(prompt_file, text_column="prompt", continuation_column="answer")
    options = GenerationBenchmarkOptions(
        methods=["LogAt", "AttCAT", "Random"],
        metrics=["aopc", "soft_ns"],
        batch_size=2,
        progress=False,
        task=lm_dir.name,
    )
    api = run_generation_benchmark(model, tiny_lm_tokenizer(), data, options)
    assert [(r["task"], r["method"]) for r in written["table"]] == [
        (row.task, row.method) for row in api.rows
    ]
    for cli_row, row in zip(written["table"], api.rows):
        for column in ("AOPC", "Soft-NS"):
            expected = row.metrics[column]
            assert cli_row[column] == pytest.approx(expected, abs=1e-6, nan_ok=True)
    assert "Kendall-tau" not in written["metrics"]
    examples = written["generation_examples"][lm_dir.name]
    assert examples[0]["target_tokens"] == ["a", "mat"]
    # A heatmap row "mat" per method in the two kept examples that generate it.
    assert (out / "report.html").read_text().count("<tr><th>mat</th>") == 3 * 2


def test_benchmark_generates_continuations_without_a_target_column(
    lm_dir, prompt_file, tmp_path, capsys
):
    argv = ["benchmark", "--model", str(lm_dir), "--data", str(prompt_file)]
    argv += ["--prompt-column", "prompt", "--max-new-tokens", "2", "--methods"]
    argv += ["LogAt", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    written = json.loads((tmp_path / "results.json").read_text())
    settings = written["config"]["generation"][lm_dir.name]
    assert settings == {
        "continuations": "generated",
        "max_new_tokens": 2,
        "metric_value": "mean over each example's target tokens",
        "one_prompt_at_a_time": [],
    }
    assert f"### {lm_dir.name} (n=3)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--target-column", "answer"], "--target-column applies to a causal LM"),
        (["--max-new-tokens", "2"], "--max-new-tokens applies to a causal LM"),
        (
            ["--prompt-column", "prompt", "--target-column", "answer"]
            + ["--max-new-tokens", "2"],
            "--max-new-tokens applies when the model generates",
        ),
        (["--prompt-column", "prompt", "--label-column", "x"], "applies to classif"),
        (["--prompt-column", "prompt", "--methods", "Saliency"], "for generated text"),
        (["--prompt-column", "prompt", "--metrics", "hiding_revealing"], "metric for"),
        (["--prompt-column", "prompt", "--max-new-tokens", "0"], "must be >= 1"),
        (["--prompt-column", "nope"], "no column 'nope'"),
    ],
)
def test_benchmark_bad_flags_end_in_one_line(
    lm_dir, prompt_file, tmp_path, capsys, extra, expected
):
    argv = ["benchmark", "--model", str(lm_dir), "--data", str(prompt_file)]
    code = main(argv + ["--out", str(tmp_path), "--no-progress", *extra])
    one_line_error(capsys, code, expected)


def test_benchmark_prompt_column_needs_your_model(tmp_path, capsys):
    code = main(["benchmark", "--prompt-column", "prompt", "--out", str(tmp_path)])
    one_line_error(capsys, code, "--prompt-column applies to your causal LM")


def test_benchmark_tasks_default_to_the_first_run_and_full_to_all():
    from captum_ext.cli.options import BENCHMARK_TASKS
    from captum_ext.cli.parser import parse_command
    from captum_ext.evaluation.tasks import BUILT_IN_TASKS

    built_in = ("sentiment", "source", "digits", "recall", "recall_long", "flags")
    assert BENCHMARK_TASKS == BUILT_IN_TASKS == built_in
    default = parse_command(["benchmark"]).options
    assert default.built_in_tasks() == ["sentiment", "digits", "recall", "flags"]
    assert default.examples() == 16
    full = parse_command(["benchmark", "--full"]).options
    assert (full.built_in_tasks(), full.examples()) == (list(BUILT_IN_TASKS), 64)
    # Given flags win over --full's.
    chosen = parse_command(["benchmark", "--full", "--tasks", "flags", "--n", "8"])
    assert (chosen.options.built_in_tasks(), chosen.options.examples()) == (
        ["flags"],
        8,
    )
    limited = parse_command(["benchmark", "--n", "8", "--limit", "4"]).options
    assert limited.examples() == 4


def test_benchmark_tasks_recall_runs_the_default_generator(
    monkeypatch, tmp_path, capsys
):
    from captum_ext.evaluation import tasks

    monkeypatch.setattr(
        tasks,
        "load_default_generator",
        lambda device, recipe: tiny_recall_generator(task=recipe.task),
    )
    argv = ["benchmark", "--tasks", "recall", "--n", "3", "--methods", "LogAt"]
    argv += ["Random", "--metrics", "aopc", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "### recall (n=3)" in out
    header = "| method | family | Evidence@1 ↑ | Evidence@3 ↑ | EvidenceSet@1 ↑ "
    assert header + "| EvidenceSet@3 ↑ | AOPC ↑ |" in out
