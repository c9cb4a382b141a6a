#!/usr/bin/env python3
import subprocess
import sys
from pathlib import Path

import pytest
from captum_ext import benchmark
from captum_ext.benchmark import METHODS
from captum_ext.cli import main

from tests.test_benchmark import embedding_decoders, save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
TEXT = "the movie was <script> & fun"


@pytest.fixture(autouse=True)
def no_decoder_fitting(monkeypatch):
    monkeypatch.setattr(benchmark, "decoders_for", embedding_decoders)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny_model"))


def test_explain_prints_prediction_and_every_method(model_dir, capsys):
    assert main(["explain", TEXT, "--model", str(model_dir)]) == 0
    out = capsys.readouterr().out
    assert "prediction: " in out
    for name, spec in METHODS.items():
        if spec.family != "control":
            assert f"\n{name} " in out, name
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
    assert "&lt;</mark>" in html and "&amp;</mark>" in html  # "<", "script", ">"
    assert "&lt;mixed&gt;" in html


def test_explain_reports_an_unknown_method(model_dir, capsys):
    assert main(["explain", TEXT, "--model", str(model_dir), "--methods", "No"]) == 2
    assert "unknown method(s) ['No']" in capsys.readouterr().err


def test_explain_reports_a_missing_model_directory(tmp_path, capsys):
    assert main(["explain", TEXT, "--model", str(tmp_path / "missing")]) == 2
    assert "captum-ext explain: error:" in capsys.readouterr().err


def test_module_entry_point_shows_help():
    result = subprocess.run(
        [sys.executable, "-m", "captum_ext.cli", "benchmark", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0
    for option in ("--n", "--methods", "--device", "--out", "--tasks"):
        assert option in result.stdout


@pytest.mark.integration
def test_benchmark_command_on_the_default_models(tmp_path):
    out = tmp_path / "bench"
    result = subprocess.run(
        [sys.executable, "-m", "captum_ext.cli", "benchmark", "--n", "8"]
        + ["--out", str(out), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("results.csv", "results.json", "results.md", "report.html"):
        assert (out / name).stat().st_size > 0, name
    for task in ("sentiment", "source"):
        assert f"### {task} (n=8)" in result.stdout
        assert (out / f"{task}_AOPC_curve.png").exists()
        assert (out / f"{task}_AttCAT_layers.png").exists()
