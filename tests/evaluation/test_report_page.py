#!/usr/bin/env python3
r"""The report page as a reader sees it: parsed HTML structure (always), and a
real headless Chromium screenshot where Chromium is installed."""

import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy
import pytest
import torch
from captum_ext.evaluation.report import DEFINITIONS, write_report
from captum_ext.evaluation.results import BenchmarkResult, MethodResult
from captum_ext.visualization import Explanation

TOKENS = ["[CLS]", "it", "is", "hope", "##less", "##ly", "dull", ".", "[SEP]"]
SPECIALS = [True] + [False] * 7 + [True]
# AttCAT-like: [CLS] and [SEP] dwarf every word (7-29x in the default models).
ATTCAT = torch.tensor([29.0, 0.2, 0.1, -0.6, -1.0, -0.4, -0.8, 0.05, 7.0])
METRICS = {"AOPC": True, "LOdds": False, "Kendall-tau": False}
METRICS.update({"Hide": False, "Reveal": True, "Sufficiency": False})
Mark = Dict[str, str]


class _Page(HTMLParser):
    r"""Collects each table row of the examples as words of pieces (marks)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: List[List[List[Mark]]] = []
        self.definitions: Dict[str, str] = {}
        self.captions: List[str] = []
        self._mark: Optional[Mark] = None
        self._in: Optional[str] = None
        self._term = ""

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]):
        values = {k: v or "" for k, v in attrs}
        if tag == "tr":
            self.rows.append([])
        elif tag == "span" and values.get("class") == "word":
            self.rows[-1].append([])
        elif tag == "mark":
            self._mark = dict(values, text="")
            self.rows[-1][-1].append(self._mark)
        elif tag in ("dt", "dd", "figcaption"):
            self._in = tag
            if tag == "figcaption":
                self.captions.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "mark":
            self._mark = None
        if tag in ("dt", "dd", "figcaption"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._mark is not None:
            self._mark["text"] += data
        elif self._in == "dt":
            self._term = data
        elif self._in == "dd":
            self.definitions[self._term] = self.definitions.get(self._term, "") + data
        elif self._in == "figcaption":
            self.captions[-1] += data


def _alpha(mark: Mark) -> float:
    found = re.search(r"rgba\((\d+), (\d+), (\d+), ([\d.]+)\)", mark.get("style", ""))
    return float(found.group(4)) if found else 0.0


def _result() -> BenchmarkResult:
    example = Explanation(
        tokens=list(TOKENS),
        scores={"AttCAT": ATTCAT, "Random": torch.linspace(-1, 1, len(TOKENS))},
        label_names=["negative", "positive"],
        pred_class=0,
        pred_prob=0.97,
        target=0,
        true_class=0,
        special_mask=list(SPECIALS),
        text="It is hopelessly dull.",
    )
    rows = [
        MethodResult(
            "sentiment",
            name,
            family,
            8,
            {m: 0.5 for m in METRICS},
            {"AOPC": ([0.5, 1.0], [0.2, 0.4])},
            seconds,
            1.0,
        )
        for name, family, seconds in (
            ("AttCAT", "captum_ext", 3.0),
            ("GlobEnc", "captum_ext", 0.2),
            ("Random", "control", 0.1),
        )
    ]
    rows[1].class_agnostic = True  # field set by the engine's registry
    return BenchmarkResult(
        rows=rows,
        metrics=METRICS,
        examples={"sentiment": [example]},
        config={"tasks": {"sentiment": 8}, "methods": ["AttCAT", "GlobEnc"]},
        wall_seconds=60.0,
        layer_maps={
            "sentiment": {"Decoded Grad-CAM": (list(TOKENS), torch.rand(7, 9))}
        },
    )


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Tuple[Path, _Page]:
    out = tmp_path_factory.mktemp("report")
    path = write_report(_result(), out)["html"]
    parsed = _Page()
    parsed.feed(path.read_text())
    return path, parsed


def _attcat_row(parsed: _Page) -> List[List[Mark]]:
    return next(r for r in parsed.rows if r and r[1][0]["text"] == "it")


def test_attcat_row_with_a_huge_cls_still_colours_the_real_tokens(page):
    _, parsed = page
    words = _attcat_row(parsed)
    real = [m for word in words for m in word if "special" not in m["class"]]
    assert len(real) == 7
    # The strongest word is fully coloured, most words visibly so.
    assert max(_alpha(m) for m in real) == 1.0
    assert sum(_alpha(m) >= 0.2 for m in real) >= 5
    # Negative scores are red: "less" carries the row's peak magnitude.
    less = words[3][1]
    assert less["text"] == "less" and "rgba(220, 30, 30, 1.00)" in less["style"]


def test_special_tokens_are_greyed_with_their_value_in_the_tooltip(page):
    _, parsed = page
    cls = _attcat_row(parsed)[0][0]
    assert cls["class"] == "tok special" and "style" not in cls
    assert cls["text"] == "[CLS]" and "+29.000" in cls["title"]


def test_word_pieces_render_as_one_word(page):
    _, parsed = page
    words = _attcat_row(parsed)
    assert ["".join(m["text"] for m in word) for word in words] == [
        "[CLS]",
        "it",
        "is",
        "hopeless" + "ly",
        "dull",
        ".",
        "[SEP]",
    ]
    assert len(words[3]) == 3  # each piece keeps its own colour


def test_every_metric_is_defined_with_its_direction(page):
    _, parsed = page
    for metric, up in METRICS.items():
        definition = parsed.definitions[metric]
        assert definition.startswith(DEFINITIONS[metric][:30])
        assert definition.endswith("Higher is better." if up else "Lower is better.")
    assert "0.9 is impossible" in parsed.definitions["time (x forward)"]


def test_table_says_na_for_class_agnostic_and_flags_impossible_timings(page):
    path, _ = page
    text = path.read_text()
    # n/a is explained in a tooltip, not a plain number.
    agnostic = r'<td class="num na" title="[^"]+">n/a \(class-agnostic\)</td>'
    assert re.search(agnostic, text)
    assert re.search(r'<td class="num flag" title="[^"]+">⚠ 0\.2</td>', text)
    assert re.search(r'<td class="num">0\.1</td></tr>', text)  # control unflagged


def test_figures_are_captioned_with_axes_text_gold_prediction(page):
    _, parsed = page
    frontier, curve, layers = parsed.captions
    assert "time ratio (x, log scale)" in frontier and "Hollow markers" in frontier
    assert "drop in p(class) at this level (y)" in curve
    assert "It is hopelessly dull." in layers
    assert "true class negative; prediction: negative (p=0.970)" in layers


def test_configuration_is_one_setting_per_line(page):
    _, parsed = page
    assert parsed.definitions["tasks"] == "sentiment: 8"
    assert parsed.definitions["methods"] == "AttCAT, GlobEnc"
    benchmark = parsed.definitions["benchmark wall time"]
    assert benchmark == "60 s (model preparation not included)"


def _chromium() -> Optional[str]:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed")
def test_chromium_renders_visible_colour_on_the_attcat_row(page, tmp_path):
    from PIL import Image

    path, _ = page
    chromium = _chromium()
    assert chromium is not None
    shot = tmp_path / "page.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}",
            f"--screenshot={shot}",
            "--window-size=1400,3000",
            path.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    rgb = numpy.asarray(Image.open(shot).convert("RGB")).astype(int)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    # The AttCAT row's strong reds: the CSS colour blended at alpha >= 0.8.
    red = int(((r > 200) & (g < 90) & (b < 90)).sum())
    green = int(((g > 150) & (r < 90) & (b < 90)).sum())
    assert red > 500 and green > 100, (red, green)
