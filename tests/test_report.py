#!/usr/bin/env python3
import base64
import csv
import json
import math
import re

import pytest
import torch
from captum_ext.evaluation.results import BenchmarkResult, MethodResult
from captum_ext.report import markdown_table, to_json, write_report
from captum_ext.visualization import Explanation

GRID = [0.1, 0.5, 1.0]


def _row(method: str, family: str, aopc: float, lodds: float) -> MethodResult:
    return MethodResult(
        task="sentiment",
        method=method,
        family=family,
        n=4,
        metrics={"AOPC": aopc, "LOdds": lodds},
        curves={"AOPC": (GRID, [aopc / 2, aopc, 1.5 * aopc])},
        seconds=0.5,
        forward_seconds=0.25,
    )


def _fake_result() -> BenchmarkResult:
    example = Explanation(
        tokens=["[CLS]", "<script>", "&", "[SEP]"],
        scores={
            "AttCAT": torch.tensor([0.0, 1.0, -0.5, 0.0]),
            "Random": torch.tensor([0.2, 0.1, 0.3, 0.0]),
        },
        label_names=["negative", "positive"],
        pred_class=1,
        pred_prob=0.9,
        target=1,
        true_class=1,
    )
    return BenchmarkResult(
        rows=[
            _row("AttCAT", "captum_ext", 0.4, -1.25),
            _row("Random", "control", 0.1, math.nan),
        ],
        metrics={"AOPC": True, "LOdds": False},
        examples={"sentiment": [example]},
        config={"tasks": {"sentiment": 4}, "threads": 2},
        wall_seconds=12.0,
        layer_maps={
            "sentiment": {"AttCAT": (example.tokens, torch.arange(12.0).view(3, 4))}
        },
    )


def test_markdown_table_has_directions_values_best_marks_and_time_ratio():
    table = markdown_table(_fake_result())
    lines = table.splitlines()
    assert lines[0] == "### sentiment (n=4)"
    assert lines[2] == "| method | family | AOPC ↑ | LOdds ↓ | time (x forward) |"
    assert lines[4] == "| AttCAT | captum_ext | 0.400* | -1.250* | 2.0 |"
    assert lines[5] == "| Random | control | 0.100 | nan | 2.0 |"


def test_random_control_is_never_marked_best():
    result = _fake_result()
    result.rows[1].metrics["AOPC"] = 0.9  # Random beats AttCAT on AOPC
    lines = markdown_table(result).splitlines()
    assert lines[4].startswith("| AttCAT | captum_ext | 0.400* |")
    assert lines[5].startswith("| Random | control | 0.900 |")


def test_csv_has_one_row_per_method_with_every_metric(tmp_path):
    paths = write_report(_fake_result(), tmp_path)
    with open(paths["csv"]) as handle:
        rows = list(csv.DictReader(handle))
    assert [r["method"] for r in rows] == ["AttCAT", "Random"]
    assert float(rows[0]["AOPC"]) == 0.4 and float(rows[0]["LOdds"]) == -1.25
    assert math.isnan(float(rows[1]["LOdds"]))
    assert float(rows[0]["time_ratio"]) == 2.0
    assert rows[0]["family"] == "captum_ext" and rows[0]["n"] == "4"


def test_json_is_strict_and_complete(tmp_path):
    paths = write_report(_fake_result(), tmp_path)
    data = json.loads(paths["json"].read_text(), parse_constant=pytest.fail)
    assert data == json.loads(json.dumps(to_json(_fake_result())))
    assert data["metrics"] == {
        "AOPC": {"higher_is_better": True},
        "LOdds": {"higher_is_better": False},
    }
    first, second = data["rows"]
    assert first["metrics"] == {"AOPC": 0.4, "LOdds": -1.25}
    assert second["metrics"]["LOdds"] is None  # NaN is not JSON
    assert first["curves"]["AOPC"]["grid"] == GRID
    assert first["curves"]["AOPC"]["mean"] == pytest.approx([0.2, 0.4, 0.6])
    example = data["examples"]["sentiment"][0]
    assert example["tokens"][1] == "<script>"
    assert example["scores"]["AttCAT"] == [0.0, 1.0, -0.5, 0.0]
    assert len(data["layer_maps"]["sentiment"]["AttCAT"]["scores"]) == 3


def test_plots_are_png_files(tmp_path):
    write_report(_fake_result(), tmp_path)
    for name in ("sentiment_AOPC_curve.png", "sentiment_AttCAT_layers.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # LOdds has no curve in this run, so no plot.
    assert not (tmp_path / "sentiment_LOdds_curve.png").exists()


def test_html_report_is_self_contained_and_escaped(tmp_path):
    paths = write_report(_fake_result(), tmp_path)
    page = paths["html"].read_text()
    assert "<script" not in page
    assert "&lt;script&gt;" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//|[^"'d])""", page)
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 2
    assert base64.b64decode(images[0])[:4] == b"\x89PNG"
    assert "<td>AttCAT</td>" in page and "0.400*" in page


def test_markdown_file_matches_terminal_table(tmp_path):
    paths = write_report(_fake_result(), tmp_path)
    assert paths["markdown"].read_text() == markdown_table(_fake_result()) + "\n"
