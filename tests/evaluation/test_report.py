#!/usr/bin/env python3
import base64
import csv
import importlib
import json
import math
import re
from pathlib import Path
from typing import Any, cast, NoReturn

import numpy as np
import pytest
import torch
from captum_ext.evaluation import figures, frontier, report, result_views
from captum_ext.evaluation.report import markdown_table, write_report
from captum_ext.evaluation.results import BenchmarkResult, MethodResult
from captum_ext.visualization import Explanation
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.text import Text

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


def test_markdown_table_has_directions_values_best_marks_and_time_ratio() -> None:
    table = markdown_table(_fake_result())
    lines = table.splitlines()
    assert lines[0] == "### sentiment (n=4)"
    assert lines[2] == "| method | family | AOPC ↑ | LOdds ↓ | time (x forward) |"
    assert lines[3] == "|---|---|---:|---:|---:|"
    assert lines[4] == "| AttCAT | captum_ext | 0.400* | -1.250* | 2.0 |"
    assert lines[5] == "| Random | control | 0.100 | n/a | 2.0 |"


def test_examples_a_metric_cannot_score_are_counted_as_n_a() -> None:
    result = _fake_result()
    attcat = result.rows[0]
    attcat.per_example = {"AOPC": [0.5, math.nan, 0.3, math.nan], "LOdds": [-1.25]}
    lines = markdown_table(result).splitlines()
    assert lines[4] == "| AttCAT | captum_ext | 0.400* (2 n/a) | -1.250* | 2.0 |"
    page = result_views.html_table(
        result_views.table_cells(result.task_rows("sentiment"))
    )
    assert (
        'title="2 of 4 examples left out of the mean: 2 have no token the metric '
        "can perturb" in page
    )


def test_implausible_time_ratio_is_flagged_except_for_the_control() -> None:
    result = _fake_result()
    for row in result.rows:
        row.seconds = 0.1  # 0.4 x a forward pass
    lines = markdown_table(result).splitlines()
    assert lines[4].endswith("| ⚠ 0.4 |")
    assert lines[5].endswith("| 0.4 |")  # Random runs no forward pass
    assert "below 0.9 is impossible" in lines[-1]


def test_kendall_tau_is_not_applicable_to_class_agnostic_methods(
    tmp_path: Path,
) -> None:
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


def test_markdown_escapes_html_pipes_and_terminal_escapes() -> None:
    result = _fake_result()
    result.rows[0].method = "<script>alert(1)</script>|x\x1b[31m"
    table = markdown_table(result)
    assert not re.search(r"(?<!\\)<", table) and "\x1b" not in table
    # ESC shown as a visible escape, its backslash escaped for Markdown.
    assert "| \\<script\\>alert(1)\\</script\\>\\|x\\\\x1b[31m | captum_ext |" in table


def test_markdown_read_as_text_holds_no_html_entities() -> None:
    result = _fake_result()
    result.rows[0].method = 'it\'s "R&D"'
    table = markdown_table(result)
    assert '| it\'s "R\\&D" |' in table
    assert not re.search(r"&(#x?[0-9a-f]+|[a-z]+);", table)


def test_random_control_is_never_marked_best() -> None:
    result = _fake_result()
    result.rows[1].metrics["AOPC"] = 0.9  # Random beats AttCAT on AOPC
    lines = markdown_table(result).splitlines()
    # No method beats Random on AOPC: no star at all.
    assert lines[4].startswith("| AttCAT | captum_ext | 0.400 | -1.250* |")
    assert lines[5].startswith("| Random | control | 0.900 |")


def test_csv_has_one_row_per_method_with_every_metric(tmp_path: Path) -> None:
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


def test_json_is_strict_and_complete(tmp_path: Path) -> None:
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


def test_plots_are_png_files(tmp_path: Path) -> None:
    write_report(_fake_result(), tmp_path)
    for name in ("sentiment_AOPC_curve.png", "sentiment_AttCAT_layers.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # LOdds has no curve in this run, so no plot.
    assert not (tmp_path / "sentiment_LOdds_curve.png").exists()


def test_html_report_shows_this_runs_plots_only(tmp_path: Path) -> None:
    # An earlier run into the same directory plotted LOdds; this one has no
    # LOdds curve, so its page must not embed the old picture.
    stale = tmp_path / "sentiment_LOdds_curve.png"
    stale.write_bytes(b"\x89PNG\r\n\x1a\n stale")
    page = write_report(_fake_result(), tmp_path)["html"].read_text()
    # The frontier, the AOPC curve and the layer map.
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 3
    assert 'alt="sentiment_LOdds_curve"' not in page


def test_html_report_is_self_contained_and_escaped(tmp_path: Path) -> None:
    paths = write_report(_fake_result(), tmp_path)
    page = paths["html"].read_text()
    assert "<script" not in page
    assert "&lt;script&gt;" in page
    # Nothing outside the page: data URIs and links to its own sections only.
    assert not re.search(r"""(src|href)=["']?(https?:|//|[^"'d#])""", page)
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 3
    assert base64.b64decode(images[0])[:4] == b"\x89PNG"
    assert "<td>AttCAT</td>" in page and "0.400*" in page


def test_markdown_file_is_the_terminal_table_plus_definitions(tmp_path: Path) -> None:
    paths = write_report(_fake_result(), tmp_path)
    text = paths["markdown"].read_text()
    assert text.startswith(markdown_table(_fake_result()) + "\n\n")
    assert "- **AOPC**: area over the perturbation curve" in text
    assert "Higher is better." in text and "Lower is better." in text


def test_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    write_report(_fake_result(), tmp_path)
    write_report(_fake_result(), tmp_path)  # rerun over existing files
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_importing_the_report_switches_no_matplotlib_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import matplotlib

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("matplotlib.use called at import")

    monkeypatch.setattr(matplotlib, "use", refuse)
    importlib.reload(figures)  # where the report's figures are drawn
    importlib.reload(report)


def test_every_method_gets_a_distinct_colour_and_marker() -> None:
    rows = [_row(f"m{i}", "captum_ext", 0.1, 0.1) for i in range(15)]
    rows.append(_row("Random", "control", 0.1, 0.1))
    styles = figures._styles(rows)
    pairs = {(str(s["color"]), s["marker"]) for s in styles}
    assert len(pairs) == 16
    assert styles[-1] == {"color": "black", "marker": "x", "linestyle": ":"}


def test_disturbed_repetitions_flag_the_time_and_the_note_says_how_it_was_taken() -> (
    None
):
    result = _fake_result()
    attcat = result.rows[0]
    assert not attcat.timing_suspect
    attcat.spreads = [1.1, 2.5]  # one batch's repetitions 2.5x apart
    assert attcat.timing_suspect
    table = markdown_table(result)
    assert f"{result_views.TIMING_FLAG} 2.0" in table
    assert "fastest run divided by the fastest forward pass" in table


def test_heatmap_axis_joins_word_pieces_to_their_words() -> None:
    tokens = ["[CLS]", "hope", "##less", "##ly", "bad", "$5", "[SEP]"]
    specials = [True, False, False, False, False, False, True]
    assert figures._ticks(tokens, specials) == [
        "[CLS]",
        "hope·",
        "·less·",
        "·ly",
        "bad",
        r"\$5",
        "[SEP]",
    ]


# ------------------------------------------------------------------- frontier
def _point_row(
    method: str, family: str, ratio: float, aopc: float, tau: float
) -> MethodResult:
    row = _row(method, family, aopc, -aopc)
    row.metrics["Kendall-tau"] = tau
    row.ratios = [ratio]
    return row


def _frontier_result() -> BenchmarkResult:
    r"""A hand-made table: (time ratio, AOPC ↑, Kendall-τ ↓) per method."""
    rows = [
        _point_row("Cheap", "captum_ext", 1.0, 0.30, 0.50),
        _point_row("Mid", "captum_ext", 2.0, 0.50, 0.10),
        _point_row("Dominated", "captum", 3.0, 0.45, 0.40),
        _point_row("Twin", "captum", 2.0, 0.50, 0.60),
        _point_row("Costly", "captum", 30.0, 0.60, 0.20),
        _point_row("Flagged", "captum", 0.5, 0.90, 0.00),  # below 0.9: suspect
        _point_row("Random", "control", 0.0, 0.10, 0.00),
    ]
    rows[1].class_agnostic = False
    rows[4].class_agnostic = True  # Kendall-τ does not apply to it
    return BenchmarkResult(
        rows=rows,
        metrics={"AOPC": True, "Kendall-tau": False},
        examples={},
        config={},
    )


def test_budget_front_names_one_method_per_budget_the_timings_tell_apart() -> None:
    FrontPoint, front = frontier.FrontPoint, frontier.budget_front
    points = [
        FrontPoint("a", 1.0, 0.3, 1.1),
        FrontPoint("b", 1.05, 0.35, 1.1),  # a's budget (5 % < 10 %), better
        FrontPoint("c", 2.0, 0.5, 1.1),
        FrontPoint("d", 2.0, 0.5, 1.1),  # c's twin: not better, not named
        FrontPoint("e", 30.0, 0.6, 1.1),
        FrontPoint("f", 1.0, 0.2, 1.1),  # worse than a at the same cost
        FrontPoint("g", math.nan, 0.9, 1.1),  # no cost: never on the front
        FrontPoint("h", 40.0, 0.55, 1.1),  # dearer and worse than e
    ]
    assert [p.method for p in front(points, True)] == ["b", "c", "e"]
    # Lower is better: the cheapest with the lowest value wins everything.
    assert [p.method for p in front(points, False)] == ["f"]
    # A method must beat the random control's value strictly.
    assert [p.method for p in front(points, True, floor=0.5)] == ["e"]
    assert front(points, True, floor=0.9) == [] and front([], True) == []
    # Without a spread (exact costs), 5 % apart are two budgets.
    exact = [p._replace(spread=1.0) for p in points[:2]]
    assert [p.method for p in front(exact, True)] == ["a", "b"]


def test_budget_front_does_not_follow_timing_noise() -> None:
    FrontPoint, front = frontier.FrontPoint, frontier.budget_front
    # Two runs of one job: the same values, costs jittered within the spread.
    run_1 = [
        FrontPoint("Attention", 1.00, 0.325, 1.2),
        FrontPoint("Norm", 0.95, 0.275, 1.2),
    ]
    run_2 = [
        FrontPoint("Attention", 0.96, 0.325, 1.2),
        FrontPoint("Norm", 1.02, 0.275, 1.2),
    ]
    assert [p.method for p in front(run_1, True)] == ["Attention"]
    assert [p.method for p in front(run_2, True)] == ["Attention"]


def test_frontier_leaves_out_the_control_flagged_timings_and_na_cells() -> None:
    result = _frontier_result()
    rows = result.task_rows("sentiment").rows
    aopc = frontier.budget_front(frontier.frontier_points(rows, "AOPC"), True)
    assert [p.method for p in aopc] == ["Cheap", "Mid", "Costly"]
    assert [p.method for p in frontier.flagged_points(rows, "AOPC")] == ["Flagged"]
    assert frontier.control_value(rows, "AOPC") == 0.10
    # A cost's spread: the median over batches (one disturbed batch moves it not).
    rows[0].spreads = [1.1, 1.9, 1.2]
    assert frontier.frontier_points(rows, "AOPC")[0].spread == 1.2
    tau_points = frontier.frontier_points(rows, "Kendall-tau")
    assert "Costly" not in [p.method for p in tau_points]
    tau = frontier.budget_front(tau_points, False)
    assert [p.method for p in tau] == ["Cheap", "Mid"]
    # Random's τ of 0.0 is better than every method's: none is named.
    assert frontier.budget_front(tau_points, False, floor=0.0) == []


def test_frontier_sentence_names_each_method_with_its_budget() -> None:
    table = _frontier_result().task_rows("sentiment")
    sentence = result_views.frontier_sentence(table, "AOPC")
    assert sentence == (
        "On sentiment, the best AOPC (higher is better) for a budget in forward "
        "passes: Cheap (0.300) from 1.0×, Mid (0.500) from 2.0× and Costly "
        "(0.600) from 30.0× (costs within the timings' own spread, up to 1.00×, "
        "count as one budget; a method must beat Random (0.100) to be named)."
    )
    tau = result_views.frontier_sentence(table, "Kendall-tau")
    assert tau == (
        "On sentiment, no method with a measured cost beats Random (0.000) on "
        "Kendall-tau."
    )


def test_frontier_figure_draws_flagged_timings_hollow_and_labels_apart(
    tmp_path: Path,
) -> None:
    table = _frontier_result().task_rows("sentiment")
    # Crowd the cheap end: four more methods within 10 % of one forward pass.
    for index in range(4):
        row = _point_row(f"Crowded {index}", "captum", 1.0 + 0.02 * index, 0.3, 0.5)
        table.rows.append(row)
    fig = figures.frontier_drawing(table)
    # For mypy: a figure (a metric has a point), on the Agg canvas it measured with.
    assert fig is not None and isinstance(fig.canvas, FigureCanvasAgg)
    fig.tight_layout()  # as saved
    fig.canvas.draw()  # places the annotations' text
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = [t for t in ax.texts if t.get_text() != "Random"]
        # The text's own box (an annotation's box would include its leader line).
        boxes = [Text.get_window_extent(t, renderer) for t in labels]
        # For mypy: every collection is a scatter's (markers and the front's rings).
        scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
        assert len(scatters) == len(ax.collections)
        # One marker per method (the front's rings are the larger ones).
        points = [c for c in scatters if c.get_sizes()[0] < 50]
        # Every method but the control, flagged included, has its label.
        assert len(boxes) == len(points) >= 9
        for i, box in enumerate(boxes):
            assert not any(box.overlaps(other) for other in boxes[i + 1 :])
        # The flagged timing is drawn hollow (no face), every other point filled.
        # RGBA rows [n, 4]: a collection's colours are an array (the stub's
        # ColorType union also allows one colour).
        faces = [cast(np.ndarray, c.get_facecolor()) for c in points]
        assert sum(len(face) == 0 or face[0][3] == 0 for face in faces) == 1
        assert "Flagged (flagged)" in [t.get_text() for t in labels]
    assert figures.frontier_figure(table, tmp_path / "front.png")
    assert (tmp_path / "front.png").read_bytes()[:4] == b"\x89PNG"


def test_frontier_is_at_the_top_of_the_report_and_in_results_md(tmp_path: Path) -> None:
    paths = write_report(_frontier_result(), tmp_path)
    page = paths["html"].read_text()
    body = page.split("<body>", 1)[1]
    assert body.index("faithfulness against cost") < body.index('id="how-to-read"')
    assert 'alt="sentiment_frontier"' in page
    assert (tmp_path / "sentiment_frontier.png").read_bytes()[:4] == b"\x89PNG"
    text = paths["markdown"].read_text()
    assert "![sentiment: each metric against cost](sentiment_frontier.png)" in text
    table = _frontier_result().task_rows("sentiment")
    assert result_views.frontier_sentence(table, "AOPC") in text


def test_the_report_links_its_sections_and_puts_the_tables_before_the_definitions(
    tmp_path: Path,
) -> None:
    page = write_report(_frontier_result(), tmp_path)["html"].read_text()
    body = page.split("<body>", 1)[1]
    links = '<a href="#task-0">sentiment</a> · <a href="#how-to-read">'
    assert body.index(links) < body.index("faithfulness against cost")
    table = '<h2 id="task-0">sentiment</h2><div class="wide"><table>'
    assert body.index(table.replace("<div", "\n<div")) < body.index(
        '<h2 id="how-to-read">'
    )
    assert body.index('<h2 id="how-to-read">') < body.index('id="configuration"')


# ---------------------------------------------------------------- reprs
def test_a_result_repr_fits_a_terminal_and_names_the_front() -> None:
    text = repr(_frontier_result())
    lines = text.splitlines()
    assert len(lines) <= 5 and all(len(line) <= 100 for line in lines)
    assert lines[1].startswith("  sentiment (n=4) AOPC front: Cheap 0.300 @1.0x, Mid")
    assert "\x1b" not in text


def test_a_result_shows_the_reports_table_and_highlights_in_a_notebook() -> None:
    page = _fake_result()._repr_html_()
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "<td>AttCAT</td>" in page and "0.400*" in page  # the report's table
    assert 'class="tok"' in page  # the highlighted example
    assert "faithfulness against cost" in page
    assert page.count('src="data:image/png;base64,') == 1  # the frontier
    # The report's styles apply inside the result only.
    assert "body {" not in page and ".captum-ext mark.tok" in page


def test_no_signal_examples_are_counted_and_their_method_never_starred() -> None:
    result = _fake_result()
    flat = _row("Flat", "captum_ext", math.nan, math.nan)
    flat.metrics = {}
    flat.curves = {"AOPC": (GRID, [math.nan] * 3)}
    flat.constant = [0, 1, 2, 3]
    result.rows.insert(1, flat)
    attcat = result.rows[0]
    attcat.constant = [2]
    attcat.per_example = {"AOPC": [0.5, 0.4, math.nan, 0.3], "LOdds": [-1.25]}
    lines = markdown_table(result).splitlines()
    header = "| method | family | AOPC ↑ | LOdds ↓ | no signal | time (x forward) |"
    assert lines[2] == header
    assert lines[4] == "| AttCAT | captum_ext | 0.400* (1 n/a) | -1.250* | 1/4 | 2.0 |"
    assert lines[5] == "| Flat | captum_ext | n/a | n/a | 4/4 | 2.0 |"
    assert lines[6] == "| Random | control | 0.100 | n/a | 0 | 2.0 |"
    cells = result_views.table_cells(result.task_rows("sentiment"))
    assert "1 with a constant explanation (no signal" in cells[1][2].note
    assert [r.method for r in figures.curve_rows(result.rows, "AOPC")] == [
        "AttCAT",
        "Random",
    ]
    # A best value no better than Random's gets no star.
    attcat.metrics["AOPC"] = 0.1
    assert (
        markdown_table(result)
        .splitlines()[4]
        .startswith("| AttCAT | captum_ext | 0.100 (1 n/a) |")
    )
