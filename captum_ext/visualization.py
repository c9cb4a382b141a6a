#!/usr/bin/env python3
r"""Token highlighting for terminals and HTML, and Captum visualisation records.

Every string that ends up in HTML is escaped here: Captum's own
``format_word_importances`` inserts tokens verbatim (captum issue #1226), so a
token such as ``<script>`` would become markup. :func:`visualization_records`
therefore hands Captum already-escaped tokens and class names, and
``captum.attr.visualization.visualize_text`` renders them unchanged and safely.
"""

import html
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, TextIO

import torch
from captum.attr import visualization as captum_viz
from torch import Tensor

__all__ = [
    "Explanation",
    "ansi_tokens",
    "explanation_html",
    "explanation_text",
    "html_page",
    "html_tokens",
    "normalize",
    "supports_color",
    "visualization_records",
]

# 256-colour backgrounds from faint to strong; black text stays readable on all.
_POSITIVE_BG = (194, 157, 120, 84, 46)
_NEGATIVE_BG = (224, 217, 210, 203, 196)
_RESET = "\x1b[0m"


@dataclass
class Explanation:
    r"""One input's prediction and every method's token scores.

    Args:
        tokens (list[str]): tokens as the tokenizer spells them (pads removed).
        scores (dict[str, Tensor]): method name -> ``[len(tokens)]`` scores.
        label_names (list[str]): class names in index order.
        pred_class (int): predicted class index.
        pred_prob (float): its softmax probability.
        target (int): the class the scores explain.
        true_class (int, optional): gold class index, if known.
    """

    tokens: List[str]
    scores: Dict[str, Tensor]
    label_names: List[str]
    pred_class: int
    pred_prob: float
    target: int
    true_class: Optional[int] = None

    def label(self, index: Optional[int]) -> str:
        if index is None:
            return "?"
        if 0 <= index < len(self.label_names):
            return self.label_names[index]
        return str(index)


def normalize(scores: Tensor) -> Tensor:
    r"""Scales ``scores`` into ``[-1, 1]`` by their largest magnitude (signs kept);
    all-zero or non-finite scores map to zeros."""
    scores = torch.nan_to_num(scores.detach().float().cpu(), 0.0, 0.0, 0.0)
    peak = scores.abs().max() if scores.numel() else torch.tensor(0.0)
    return scores / peak if peak > 0 else torch.zeros_like(scores)


def display_token(token: str) -> str:
    r"""WordPiece/BPE/SentencePiece markers stripped for display."""
    for marker in ("##", "Ġ", "▁"):
        if token.startswith(marker) and len(token) > len(marker):
            return token[len(marker) :]
    return token


def _terminal_safe(text: str) -> str:
    r"""Control characters replaced, so a token cannot emit terminal escapes."""
    return "".join(c if c.isprintable() else "\ufffd" for c in text)


def _continues_word(token: str) -> bool:
    return token.startswith("##") and len(token) > 2


def supports_color(stream: TextIO) -> bool:
    r"""ANSI colour only on a terminal, never with ``NO_COLOR`` set
    (https://no-color.org) or ``TERM=dumb``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _level(value: float) -> int:
    return min(len(_POSITIVE_BG) - 1, int(abs(value) * len(_POSITIVE_BG)))


def ansi_tokens(tokens: Sequence[str], scores: Tensor, color: bool) -> str:
    r"""One line of tokens: coloured backgrounds (green = supports the target
    class, red = against) when ``color``, else each token followed by its score
    in ``[-1, 1]`` so the line stays readable in logs and pipes."""
    values = normalize(scores).tolist()
    parts = []
    for index, (token, value) in enumerate(zip(tokens, values)):
        text = _terminal_safe(display_token(token))
        if color and abs(value) >= 0.05:
            palette = _POSITIVE_BG if value > 0 else _NEGATIVE_BG
            text = f"\x1b[30;48;5;{palette[_level(value)]}m{text}{_RESET}"
        elif not color:
            text = f"{text}[{value:+.2f}]"
        glue = index > 0 and _continues_word(token)
        parts.append(text if glue or index == 0 else " " + text)
    return "".join(parts)


def _top_tokens(tokens: Sequence[str], scores: Tensor, k: int = 3) -> str:
    values = normalize(scores)
    order = values.argsort(descending=True)[:k].tolist()
    shown = [_terminal_safe(display_token(tokens[i])) for i in order]
    return ", ".join(f"{text} ({values[i]:+.2f})" for text, i in zip(shown, order))


def explanation_text(explanation: Explanation, color: bool) -> str:
    r"""The terminal report of ``explain``: prediction, then one highlighted line
    and the top tokens per method."""
    width = max([len(name) for name in explanation.scores] + [6])
    lines = [
        f"prediction: {explanation.label(explanation.pred_class)} "
        f"(p={explanation.pred_prob:.3f}); scores explain class "
        f"{explanation.label(explanation.target)!r}",
    ]
    if explanation.true_class is not None:
        lines.append(f"true class: {explanation.label(explanation.true_class)}")
    lines.append(
        "legend: green/+ supports the class, red/- speaks against it; "
        "scores scaled by each method's largest magnitude"
    )
    for name, scores in explanation.scores.items():
        line = ansi_tokens(explanation.tokens, scores, color)
        lines.append(f"{name:<{width}}  {line}")
        lines.append(f"{'':<{width}}  top: {_top_tokens(explanation.tokens, scores)}")
    return "\n".join(lines)


def _background(value: float) -> str:
    r"""Captum's colour scale (green positive, red negative) as an HSL string."""
    value = max(-1.0, min(1.0, value))
    if value > 0:
        return f"hsl(120, 75%, {100 - int(50 * value)}%)"
    return f"hsl(0, 75%, {100 - int(-40 * value)}%)"


def html_tokens(tokens: Sequence[str], scores: Tensor) -> str:
    r"""``<mark>`` spans, one per token, every token HTML-escaped."""
    values = normalize(scores).tolist()
    spans = []
    for token, value in zip(tokens, values):
        spans.append(
            f'<mark class="tok" style="background-color: {_background(value)}" '
            f'title="{value:+.3f}">{html.escape(display_token(token))}</mark>'
        )
    return " ".join(spans)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
mark.tok { padding: 0.1em 0.2em; line-height: 1.9; color: black; }
img { max-width: 100%; }
.note { color: #555; font-size: 0.9em; }
"""


def html_page(title: str, body: str) -> str:
    r"""A self-contained page (inline CSS, no external resources)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def explanation_html(explanation: Explanation, text: Optional[str] = None) -> str:
    r"""A table body (no page around it) with one highlighted row per method."""
    rows = [
        f"<tr><td>{html.escape(name)}</td><td>"
        f"{html_tokens(explanation.tokens, scores)}</td></tr>"
        for name, scores in explanation.scores.items()
    ]
    intro = f"<p>{html.escape(text)}</p>" if text is not None else ""

    def bold(index: Optional[int]) -> str:
        return f"<b>{html.escape(explanation.label(index))}</b>"

    truth = ""
    if explanation.true_class is not None:
        truth = f"true class {bold(explanation.true_class)}; "
    prediction = (
        f"<p>{truth}prediction: {bold(explanation.pred_class)} "
        f"(p={explanation.pred_prob:.3f}); scores explain class "
        f"{bold(explanation.target)}. "
        '<span class="note">Green supports the class, red speaks against it; '
        "each row is scaled by its largest magnitude.</span></p>"
    )
    table = "<table><tr><th>method</th><th>tokens</th></tr>" + "".join(rows)
    return intro + prediction + table + "</table>"


def visualization_records(
    explanation: Explanation,
) -> List[captum_viz.VisualizationDataRecord]:
    r"""One Captum ``VisualizationDataRecord`` per method, for
    ``captum.attr.visualization.visualize_text``.

    Tokens and class names are HTML-escaped, because ``visualize_text`` inserts
    them into its markup as they are (captum issue #1226). ``word_attributions``
    are the method's scores scaled into ``[-1, 1]`` (Captum's colour range);
    ``attr_score`` is the sum of the unscaled scores, ``attr_class`` names the
    method and the explained class, ``convergence_score`` is ``nan`` (only
    Integrated Gradients has one).
    """
    tokens = [html.escape(token) for token in explanation.tokens]
    label = explanation.label
    records = []
    for name, scores in explanation.scores.items():
        records.append(
            captum_viz.VisualizationDataRecord(
                word_attributions=normalize(scores),
                pred_prob=float(explanation.pred_prob),
                pred_class=html.escape(label(explanation.pred_class)),
                true_class=html.escape(label(explanation.true_class)),
                attr_class=html.escape(f"{name}: {label(explanation.target)}"),
                attr_score=float(scores.sum()),
                raw_input_ids=tokens,
                convergence_score=float("nan"),
            )
        )
    return records
