#!/usr/bin/env python3
import base64
import csv
import importlib
import json
import math
import re

import pytest
import torch
from captum_ext import report
from captum_ext.evaluation.results import BenchmarkResult, MethodResult
from captum_ext.report import markdown_table, write_report
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
        special_mask=[True, False, False, True],
        text="<script> &",
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
    assert lines[3] == "|---|---|---:|---:|---:|"
    assert lines[4] == "| AttCAT | captum_ext | 0.400* | -1.250* | 2.0 |"
    assert lines[5] == "| Random | control | 0.100 | n/a | 2.0 |"


def test_examples_a_metric_cannot_score_are_counted_as_n_a():
    result = _fake_result()
    attcat = result.rows[0]
    attcat.per_example = {"AOPC": [0.5, math.nan, 0.3, math.nan], "LOdds": [-1.25]}
    lines = markdown_table(result).splitlines()
    assert lines[4] == "| AttCAT | captum_ext | 0.400* (2 n/a) | -1.250* | 2.0 |"
    page = report._html_table(report._cells(result, "sentiment"))
    assert 'title="2 of 4 examples have no token the metric can perturb' in page


def test_implausible_time_ratio_is_flagged_except_for_the_control():
    result = _fake_result()
    for row in result.rows:
        row.seconds = 0.1  # 0.4 x a forward pass
    lines = markdown_table(result).splitlines()
    assert lines[4].endswith("| ⚠ 0.4 |")
    assert lines[5].endswith("| 0.4 |")  # Random runs no forward pass
    assert "below 0.9 is impossible" in lines[-1]


def test_kendall_tau_is_not_applicable_to_class_agnostic_methods(tmp_path):
    result = _fake_result()
    result.metrics["Kendall-tau"] = False
    for row, tau in zip(result.rows, (1.0, 0.5)):
        row.metrics["Kendall-tau"] = tau
    result.rows[0].class_agnostic = True  # field set by the engine's registry
    lines = markdown_table(result).splitlines()
    assert (
        lines[4]
        == "| AttCAT | captum_ext | 0.400* | -1.250* | n/a (class-agnostic) | 2.0 |"
    )
    # Not a contender for the best mark either (Random never is): no "*".
    assert lines[5] == "| Random | control | 0.100 | n/a | 0.500 | 2.0 |"
    paths = write_report(result, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["table"][0]["class_agnostic"] is True
    assert data["table"][0]["Kendall-tau"] == 1.0  # raw value kept
    with open(paths["csv"]) as handle:
        assert [r["class_agnostic"] for r in csv.DictReader(handle)] == [
            "True",
            "False",
        ]


def test_markdown_escapes_html_pipes_and_terminal_escapes():
    result = _fake_result()
    result.rows[0].method = "<script>alert(1)</script>|x\x1b[31m"
    table = markdown_table(result)
    assert "<script" not in table and "\x1b" not in table
    assert (
        "| &lt;script&gt;alert(1)&lt;/script&gt;\\|x\\x1b[31m | captum_ext |" in table
    )


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
    assert rows[0]["timing_suspect"] == "False"
    assert [r["class_agnostic"] for r in rows] == ["False", "False"]
    assert rows[0]["family"] == "captum_ext" and rows[0]["n"] == "4"


def test_json_is_strict_and_complete(tmp_path):
    paths = write_report(_fake_result(), tmp_path)
    data = json.loads(paths["json"].read_text(), parse_constant=pytest.fail)
    assert data == json.loads(json.dumps(_fake_result().to_dict()))
    assert data["metrics"] == {
        "AOPC": {"higher_is_better": True},
        "LOdds": {"higher_is_better": False},
    }
    first, second = data["table"]
    assert (first["AOPC"], first["LOdds"]) == (0.4, -1.25)
    assert second["LOdds"] is None  # NaN is not JSON
    assert first["time_ratio"] == 2.0 and first["timing_suspect"] is False
    curves = data["curves"][0]
    assert (curves["task"], curves["method"]) == ("sentiment", "AttCAT")
    assert curves["AOPC"]["grid"] == GRID
    assert curves["AOPC"]["mean"] == pytest.approx([0.2, 0.4, 0.6])
    example = data["examples"]["sentiment"][0]
    assert example["tokens"][1] == "<script>"
    assert example["special_mask"] == [True, False, False, True]
    assert example["text"] == "<script> &"
    assert example["scores"]["AttCAT"] == [0.0, 1.0, -0.5, 0.0]
    assert len(data["layer_maps"]["sentiment"]["AttCAT"]["scores"]) == 3


def test_plots_are_png_files(tmp_path):
    write_report(_fake_result(), tmp_path)
    for name in ("sentiment_AOPC_curve.png", "sentiment_AttCAT_layers.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # LOdds has no curve in this run, so no plot.
    assert not (tmp_path / "sentiment_LOdds_curve.png").exists()


def test_html_report_shows_this_runs_plots_only(tmp_path):
    # An earlier run into the same directory plotted LOdds; this one has no
    # LOdds curve, so its page must not embed the old picture.
    stale = tmp_path / "sentiment_LOdds_curve.png"
    stale.write_bytes(b"\x89PNG\r\n\x1a\n stale")
    page = write_report(_fake_result(), tmp_path)["html"].read_text()
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 2
    assert 'alt="sentiment_LOdds_curve"' not in page


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


def test_markdown_file_is_the_terminal_table_plus_definitions(tmp_path):
    paths = write_report(_fake_result(), tmp_path)
    text = paths["markdown"].read_text()
    assert text.startswith(markdown_table(_fake_result()) + "\n\n")
    assert "- **AOPC**: area over the perturbation curve" in text
    assert "Higher is better." in text and "Lower is better." in text


def test_writes_leave_no_temporary_files(tmp_path):
    write_report(_fake_result(), tmp_path)
    write_report(_fake_result(), tmp_path)  # rerun over existing files
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_importing_the_report_switches_no_matplotlib_backend(monkeypatch):
    import matplotlib

    def refuse(*args, **kwargs):
        raise AssertionError("matplotlib.use called at import")

    monkeypatch.setattr(matplotlib, "use", refuse)
    importlib.reload(report)


def test_every_method_gets_a_distinct_colour_and_marker():
    rows = [_row(f"m{i}", "captum_ext", 0.1, 0.1) for i in range(15)]
    rows.append(_row("Random", "control", 0.1, 0.1))
    styles = report._styles(rows)
    pairs = {(str(s["color"]), s["marker"]) for s in styles}
    assert len(pairs) == 16
    assert styles[-1] == {"color": "black", "marker": "x", "linestyle": ":"}
