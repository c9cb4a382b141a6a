#!/usr/bin/env python3
r"""HTML views: highlighted token rows (:func:`html_tokens`), an explanation's
table (:func:`explanation_html`), the target x prompt heatmaps of generated text
(:func:`generation_html`), a self-contained page (:func:`html_page`) and the
same styles scoped for a notebook (:func:`notebook_html`); every string
escaped."""

import re
from typing import List, Optional, Sequence

import torch
from torch import Tensor

from captum_ext.metrics._utils.ranking import no_signal
from captum_ext.visualization.escaping import html_safe
from captum_ext.visualization.record_protocols import (
    ExplanationFields,
    GenerationFields,
)
from captum_ext.visualization.tokens import (
    _mask_or_none,
    display_texts,
    normalize,
    positioned_texts,
    word_groups,
)

__all__ = [
    "HEATMAP_COLUMNS",
    "explanation_caption",
    "explanation_html",
    "generation_html",
    "html_page",
    "html_tokens",
    "notebook_html",
]


def _background(value: float) -> str:
    r"""Captum's hues (green positive, red negative) with opacity ``|value|``,
    so a zero score is white and the row's peak is fully coloured."""
    alpha = min(1.0, abs(value))
    hue = "0, 170, 0" if value > 0 else "220, 30, 30"
    return f"rgba({hue}, {alpha:.2f})"


def _html_piece(text: str, value: float, special: bool) -> str:
    text = html_safe(text)
    if special:
        title = f"special token, {value:+.3f} on this row's scale (not coloured)"
        return f'<mark class="tok special" title="{title}">{text}</mark>'
    return (
        f'<mark class="tok" style="background-color: {_background(value)}" '
        f'title="{value:+.3f}">{text}</mark>'
    )


def html_tokens(
    tokens: Sequence[str],
    scores: Tensor,
    special_mask: Optional[Sequence[bool]] = None,
) -> str:
    r"""One ``<span class="word">`` per word holding one ``<mark>`` per piece;
    every token HTML-escaped; the score (on the row's scale) in each tooltip."""
    specials = _mask_or_none(special_mask, len(tokens))
    values = normalize(scores, specials).tolist()
    texts = display_texts(tokens, specials)
    words = [
        '<span class="word">'
        + "".join(_html_piece(texts[i], values[i], specials[i]) for i in group)
        + "</span>"
        for group in word_groups(tokens, specials)
    ]
    return " ".join(words)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 90em; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.flag { background: #fff3cd; }
td.na { color: #888; font-style: italic; }
span.word { white-space: nowrap; }
mark.tok { padding: 0.15em 0.02em; line-height: 2; color: black; }
mark.special { background: none; color: #999; font-size: 0.85em; }
img { max-width: 100%; }
figure { margin: 1em 0; }
figcaption, .note { color: #555; font-size: 0.9em; }
div.wide { overflow-x: auto; }
div.wide th, div.wide td { padding: 0.3em 0.45em; }
div.wide th:first-child, div.wide td:first-child {
  position: sticky; left: 0; background: #fff; }
table.heatmap th { font-weight: normal; }
td.evidence { outline: 2px solid black; outline-offset: -2px; font-weight: 600; }
th.predicting { border-bottom: 2px dashed #888; }
dl.config { display: grid; grid-template-columns: max-content auto; gap: 0.1em 1em; }
dl.config dt { font-weight: 600; } dl.config dd { margin: 0; }
"""


def notebook_html(body: str) -> str:
    r"""``body`` with the page's styles scoped to it (no rule reaches the rest
    of a notebook), for ``_repr_html_``."""
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", _CSS)
    scoped = " ".join(
        ", ".join(f".captum-ext {part.strip()}" for part in selectors.split(","))
        + f" {{{declarations}}}"
        for selectors, declarations in rules
        if selectors.strip() != "body"
    )
    return f'<div class="captum-ext"><style>{scoped}</style>{body}</div>'


def html_page(title: str, body: str) -> str:
    r"""A self-contained page (inline CSS, no external resources)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html_safe(title)}</title><style>{_CSS}</style></head>"
        f"<body><h1>{html_safe(title)}</h1>\n{body}\n</body></html>\n"
    )


def explanation_caption(explanation: ExplanationFields) -> str:
    r"""HTML: gold class (if known), prediction with its probability and the
    explained class."""

    def bold(index: Optional[int]) -> str:
        return f"<b>{html_safe(explanation.label(index))}</b>"

    truth = ""
    if explanation.true_class is not None:
        truth = f"true class {bold(explanation.true_class)}; "
    return (
        f"{truth}prediction: {bold(explanation.pred_class)} "
        f"(p={explanation.pred_prob:.3f}); scores explain class "
        f"{bold(explanation.target)}"
    )


def explanation_html(explanation: ExplanationFields, text: Optional[str] = None) -> str:
    r"""A table body (no page around it) with one highlighted row per method;
    ``text`` (default: ``explanation.text``) is shown above it."""
    specials = explanation.specials()
    rows = [
        f"<tr><td>{html_safe(name)}</td><td>"
        f"{html_tokens(explanation.tokens, scores, specials)}</td></tr>"
        for name, scores in explanation.scores.items()
    ]
    text = explanation.text if text is None else text
    intro = f"<p>{html_safe(text)}</p>" if text is not None else ""
    prediction = (
        f"<p>{explanation_caption(explanation)}. "
        '<span class="note">Green supports the class, red speaks against it; '
        "each row is scaled by its largest magnitude over the real tokens; "
        "greyed special tokens are outside the scale (value in the tooltip)."
        "</span></p>"
    )
    table = "<table><tr><th>method</th><th>tokens</th></tr>" + "".join(rows)
    return intro + prediction + table + "</table>"


def _matrix_scale(scores: Tensor, specials: List[bool]) -> Tensor:
    r"""``[T, P]`` scores over their largest magnitude on the real prompt
    tokens but the last one, so the rows (target tokens) share one scale that
    the predicting position does not set: the last prompt token is where the
    first target token is predicted, and its own score (usually the largest,
    often negative) would leave every other cell blank. Where the other
    tokens are all zero (or there are none), the last one sets the scale."""
    real = [i for i, special in enumerate(specials) if not special]
    excluded = list(specials)
    if len(real) > 1 and bool(scores[:, real[:-1]].abs().amax() > 0):
        excluded[real[-1]] = True
    columns = torch.tensor(excluded, dtype=torch.bool).expand_as(scores)
    return normalize(scores.flatten(), columns.flatten().tolist()).view_as(scores)


def _heatmap_cell(value: float, raw: float, special: bool, evidence: bool) -> str:
    if special:
        return f'<td class="na" title="special token, {raw:+.4g}"></td>'
    known = " evidence" if evidence else ""
    title = f"{raw:+.4g}{' (the known evidence)' if evidence else ''}"
    return (
        f'<td class="num{known}" style="background-color: {_background(value)}" '
        f'title="{title}">{value:+.2f}</td>'
    )


# Prompt columns per heatmap band: a long prompt wraps onto further bands
# instead of running off the page (or hiding the evidence behind a scroll).
HEATMAP_COLUMNS = 16


def _heatmap(explanation: GenerationFields, scores: Tensor, prompt: List[str]) -> str:
    r"""One method's target x prompt table, the prompt wrapped into bands of
    :data:`HEATMAP_COLUMNS` columns, each band with its own header."""
    specials = explanation.specials()
    targets = display_texts(explanation.target_tokens)
    evidence = explanation.evidence or [-1] * len(targets)
    scaled = _matrix_scale(scores, specials)
    real = [i for i, special in enumerate(specials) if not special]
    predicting = real[-1] if real else -1

    def head(i: int) -> str:
        if i != predicting:
            return f"<th>{html_safe(prompt[i])}</th>"
        note = "predicts the first target token; outside the colour scale"
        return f'<th class="predicting" title="{note}">{html_safe(prompt[i])}</th>'

    bands = []
    for start in range(0, len(prompt), HEATMAP_COLUMNS):
        columns = range(start, min(start + HEATMAP_COLUMNS, len(prompt)))
        header = "".join(head(i) for i in columns)
        rows = [
            f"<tr><th>{html_safe(target)}</th>"
            + "".join(
                _heatmap_cell(
                    float(scaled[t, i]),
                    float(scores[t, i]),
                    specials[i],
                    t < len(evidence) and evidence[t] == i,
                )
                for i in columns
            )
            + "</tr>"
            for t, target in enumerate(targets)
        ]
        bands.append(f"<tr><th></th>{header}</tr>" + "".join(rows))
    return '<table class="heatmap">' + "".join(bands) + "</table>"


def generation_html(explanation: GenerationFields, heading: int = 2) -> str:
    r"""A body (no page around it): the prompt and continuation, then one
    target x prompt heatmap table per method under an ``<h{heading}>`` (rows:
    target tokens; columns: prompt tokens, wrapped into bands of
    :data:`HEATMAP_COLUMNS`; each method's matrix scaled by its largest
    magnitude over the real prompt tokens but the last, the position that
    predicts the first target token; raw scores in the tooltips; the known
    evidence of a target token outlined). Every string is escaped."""
    specials = explanation.specials()
    prompt = positioned_texts(explanation.prompt_texts())
    kind = "generated" if explanation.generated else "given"
    marked = (
        " A black outline marks the prompt token known to decide each target "
        "token (the planted evidence)."
        if explanation.evidence
        else ""
    )
    parts = [
        f"<p>prompt: {html_safe(explanation.prompt)}<br>{kind}: "
        f"{html_safe(explanation.continuation)}</p>",
        '<p class="note">Row t: scores for log p(target token t | prompt, '
        "earlier target tokens); green raises it, red lowers it. Each table is "
        "scaled by its largest magnitude over the prompt tokens but the last "
        "(where the first target token is predicted; its own score, often the "
        "largest, is shown as a multiple of that scale and saturates the "
        "colour; its header is underlined dashed); raw scores in the tooltips."
        f"{marked}</p>",
    ]
    tag = f"h{heading}"
    real = torch.tensor([not s for s in specials], dtype=torch.bool)  # [P]
    for name, scores in explanation.scores.items():
        # The engine's test, on this one example: its table says "no signal".
        flat = bool(no_signal(scores[None], real[None].to(scores.device)))
        note = (
            ' <span class="note">no signal: every prompt token scored the same '
            "in every row</span>"
            if flat
            else ""
        )
        parts.append(
            f"<{tag}>{html_safe(name)}{note}</{tag}>"
            f"{_heatmap(explanation, scores, prompt)}"
        )
    return "\n".join(parts)
