#!/usr/bin/env python3
r"""The ``captum-ext`` command line: every bad case ends in one line on stderr
and a non-zero exit; help is fast; nothing is fitted or fetched that the chosen
methods do not need."""

import json
import os
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pandas as pd
import pytest
from captum_ext.cli import main
from captum_ext.defaults import data as default_data
from captum_ext.evaluation import registry
from captum_ext.evaluation.names import METHOD_NAMES, METRIC_NAMES
from captum_ext.evaluation.registry import METHODS, METRICS

from tests.helpers import (
    one_line_error,
    save_tiny_model,
    tiny_masked_lm,
    tiny_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
TEXT = "the movie was <script> & fun"


pytestmark = pytest.mark.usefixtures("no_decoder_fitting")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny_model"))


def run_cli(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "captum_ext.cli", *args],
        cwd=ROOT,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **kwargs,
    )


def test_static_names_match_the_registries():
    assert list(METHOD_NAMES) == list(METHODS)
    assert list(METRIC_NAMES) == list(METRICS)


def test_explain_prints_prediction_and_every_default_method(model_dir, capsys):
    assert main(["explain", TEXT, "--model", str(model_dir)]) == 0
    out = capsys.readouterr().out
    assert "prediction: " in out
    for name, spec in METHODS.items():
        shown = spec.family != "control" and not spec.needs_decoders
        assert (f"\n{name} " in out) == shown, name
    assert "\x1b[" not in out  # captured output is not a terminal
    assert "script[" in out  # scores are printed next to tokens instead


def test_explain_writes_an_escaped_html_page(model_dir, tmp_path, capsys):
    page = tmp_path / "explanation.html"
    argv = ["explain", TEXT, "--model", str(model_dir), "--html", str(page)]
    argv += ["--methods", "AttCAT", "Saliency", "--target", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "AttCAT" in out and "Saliency" in out and "NormXLogit" not in out
    assert "scores explain class '<mixed>'" in out
    html = page.read_text()
    assert "<script" not in html and "&lt;script&gt; &amp; fun" in html
    assert "&lt;mixed&gt;" in html


def test_explain_tells_when_the_text_is_truncated(model_dir, capsys):
    argv = ["explain", "good " * 10, "--model", str(model_dir), "--methods", "Random"]
    assert main(argv + ["--max-length", "5"]) == 0
    err = capsys.readouterr().err
    assert (
        "captum-ext: notice: the text has 12 tokens and was cut to max_length=5" in err
    )


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--methods", "No"], "unknown method(s) ['No']"),
        (["--target", "7"], "target 7 is not a class of this model"),
        (["--device", "nope"], "unknown device 'nope'"),
        (["--max-length", "0"], "--max-length must be >= 1"),
        (["--target", "x"], "argument --target: invalid int value: 'x'"),
    ],
)
def test_explain_bad_options_end_in_one_line(model_dir, capsys, extra, expected):
    code: object
    with pytest.raises(SystemExit) if "invalid int" in expected else nullcontext() as e:
        code = main(["explain", TEXT, "--model", str(model_dir), *extra])
    if "invalid int" in expected:
        assert e is not None
        code = e.value.code
    one_line_error(capsys, code, expected)


@pytest.mark.parametrize("text", ["", "   \n "])
def test_explain_refuses_an_empty_text(model_dir, capsys, text):
    code = main(["explain", text, "--model", str(model_dir)])
    one_line_error(capsys, code, "the text is empty")


def test_explain_names_a_missing_model_directory(tmp_path, capsys):
    code = main(["explain", TEXT, "--model", str(tmp_path / "missing")])
    line = one_line_error(capsys, code, "captum-ext explain: error: model directory")
    assert "does not exist" in line and "Repo id" not in line


def test_explain_refuses_a_masked_lm_directory(tmp_path, capsys):
    tiny_masked_lm("bert").save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    capsys.readouterr()  # the saving's own bar
    code = main(["explain", TEXT, "--model", str(tmp_path)])
    one_line_error(capsys, code, "BertForMaskedLM, not a sequence classifier")


def test_outputs_are_checked_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    missing_model = str(tmp_path / "missing")
    code = main(
        ["explain", TEXT, "--model", missing_model, "--html", f"{blocker}/x.html"]
    )
    one_line_error(capsys, code, f"cannot write to '{blocker}'")
    code = main(["benchmark", "--out", str(blocker / "out"), "--methods", "Random"])
    one_line_error(capsys, code, f"cannot write to '{blocker / 'out'}'")


def test_debug_shows_the_traceback(tmp_path, capsys):
    argv = ["explain", TEXT, "--model", str(tmp_path / "missing"), "--debug"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.strip().endswith("or a Hub model id like org/name)")


def test_benchmark_needs_model_and_data_together(model_dir, tmp_path, capsys):
    code = main(["benchmark", "--model", str(model_dir), "--out", str(tmp_path)])
    one_line_error(capsys, code, "give both --model and --data")


def test_random_neither_fits_decoders_nor_fetches_data(model_dir, monkeypatch, capsys):
    def forbidden(*args, **kwargs):
        raise AssertionError("fitted or fetched for a method that needs nothing")

    monkeypatch.setattr(registry.methods, "decoders_for", forbidden)
    monkeypatch.setattr(default_data, "load_split", forbidden)
    monkeypatch.setattr(default_data, "vader_sdist_path", forbidden)
    argv = ["explain", TEXT, "--model", str(model_dir), "--methods", "Random"]
    assert main(argv) == 0
    assert "Random" in capsys.readouterr().out


def test_non_utf8_arguments_end_in_one_line():
    result = run_cli("explain", b"caf\xe9", "--methods", "Random")
    err = result.stderr.decode()
    assert result.returncode == 2
    assert err.strip().count("\n") == 0 and "not valid UTF-8" in err


def test_help_is_fast_and_lists_method_names():
    code = (
        "import sys\n"
        "from captum_ext.cli import main\n"
        "try:\n    main(['explain', '--help'])\n"
        "except SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported for --help'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    for name in ("NormXLogit", "'Decoded Grad-CAM'", "IntegratedGradients"):
        assert name in " ".join(result.stdout.split()), name


def test_module_entry_point_shows_benchmark_help():
    result = run_cli("benchmark", "--help", text=True)
    assert result.returncode == 0
    for option in ("--n", "--methods", "--device", "--out", "--tasks", "--model"):
        assert option in result.stdout
    for option in ("--data", "--text-column", "--label-column", "--dtype"):
        assert option in result.stdout


def test_attribute_wires_its_arguments(model_dir, tmp_path, capsys):
    data = tmp_path / "data.csv"
    data.write_text("text\nthe movie was fun\nbad plot\n")
    argv = ["attribute", "--model", str(model_dir), "--data", str(data)]
    argv += ["--methods", "Random", "--out", str(tmp_path / "out"), "--no-progress"]
    assert main(argv) == 0
    table = pd.read_parquet(tmp_path / "out")
    assert list(table["id"]) == [0, 1] and "Random" in table.columns


@pytest.mark.integration
def test_benchmark_command_on_the_default_models_equals_the_python_api(tmp_path):
    from captum_ext.evaluation.tasks import benchmark_default_tasks

    out = tmp_path / "bench"
    result = run_cli(
        "benchmark",
        "--full",
        "--n",
        "4",
        "--methods",
        "AttCAT",
        "Random",
        "--metrics",
        "aopc",
        "--out",
        str(out),
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "\x1b[A" not in result.stderr and "\r" not in result.stderr
    assert "sentiment: AttCAT: 4 examples in" in result.stderr
    for name in ("results.csv", "results.json", "results.md", "report.html"):
        assert (out / name).stat().st_size > 0, name
    for task in ("sentiment", "source"):
        assert f"### {task} (n=4)" in result.stdout
        assert (out / f"{task}_AttCAT_layers.png").exists()
        assert not (out / f"{task}_Decoded Grad-CAM_layers.png").exists()
    api = benchmark_default_tasks(
        4, methods=["AttCAT", "Random"], metrics=["aopc"], progress=False
    )
    written = json.loads((out / "results.json").read_text())["table"]
    assert [(r["task"], r["method"]) for r in written] == [
        (row.task, row.method) for row in api.rows
    ]
    for cli_row, row in zip(written, api.rows):
        assert cli_row["AOPC"] == pytest.approx(row.metrics["AOPC"], abs=1e-6)


def test_benchmark_on_your_model_and_data_equals_the_python_api(
    model_dir, tmp_path, capsys
):
    from captum_ext.evaluation import benchmark, load_classifier, load_data

    data = tmp_path / "data.csv"
    data.write_text("text,label\nthe movie was fun,positive\nbad plot,negative\n")
    out = tmp_path / "out"
    argv = ["benchmark", "--model", str(model_dir), "--data", str(data)]
    argv += ["--label-column", "label", "--methods", "AttCAT", "Random"]
    argv += ["--metrics", "aopc", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "### tiny_model" in capsys.readouterr().out
    written = json.loads((out / "results.json").read_text())["table"]
    model, tokenizer = load_classifier(model_dir)
    loaded = load_data(
        data, label_column="label", label2id=model.config.label2id, num_labels=3
    )
    api = benchmark(model, tokenizer, loaded, ["AttCAT", "Random"], ["aopc"])
    for cli_row, row in zip(written, api.rows, strict=True):
        assert cli_row["method"] == row.method
        assert cli_row["AOPC"] == pytest.approx(row.metrics["AOPC"], abs=1e-6)


@pytest.mark.parametrize("command", ["benchmark", "attribute"])
def test_a_missing_model_fails_before_torch_and_leaves_no_out(tmp_path, command):
    data = tmp_path / "data.csv"
    data.write_text("text\nfine\n")
    out = tmp_path / "new" / "out"
    argv = [command, "--model", str(tmp_path / "missing"), "--data", str(data)]
    code = (
        "import sys; from captum_ext.cli import main; "
        f"code = main({argv + ['--out', str(out)]!r}); "
        "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.stdout.split() == ["2", "False", "False"], result.stderr
    assert "model directory" in result.stderr and "does not exist" in result.stderr
    assert not (tmp_path / "new").exists()
