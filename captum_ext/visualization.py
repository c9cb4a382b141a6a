#!/usr/bin/env python3
r"""Token highlighting for terminals and HTML, and Captum visualisation records.

Three rules hold for every output here (terminal, HTML, Captum records):

- **Scale over real tokens.** Each method's row is scaled by its largest
  magnitude over the *non-special* tokens. Special tokens ([CLS], [SEP], <s>)
  often carry scores many times larger than any word (AttCAT, attention
  rollout); scaling by them would leave every word blank. Specials are shown
  greyed, outside the colour scale, with their value (on the row's scale) in the
  tooltip. Which tokens are special comes from the tokenizer
  (:func:`special_token_mask`), never from guessing at token strings; without a
  mask no token is treated as special.
- **Words, not pieces.** Word pieces are joined into the words they spell
  ("hopelessly", not "hopeless ly"), each piece keeping its own colour. Word
  boundaries follow the tokenizer's markers: WordPiece marks continuations with
  ``##``; SentencePiece (``▁``) and GPT-2 byte-level BPE (``Ġ``) mark word
  starts, so a piece without the marker continues the previous word; byte-level
  BPE pieces are decoded from their byte alphabet (:func:`display_texts`). A
  special token is always a word of its own.
- **Escaped and sanitised.** Every string that ends up in HTML is escaped:
  Captum's own ``format_word_importances`` inserts tokens verbatim (captum issue
  #1226), so :func:`visualization_records` hands Captum already-escaped words and
  class names. Strings printed to a terminal have control characters replaced,
  so a token or a class name cannot emit escape sequences.
"""

import html
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, TextIO

import torch
from captum.attr import visualization as captum_viz
from torch import Tensor

__all__ = [
    "Explanation",
    "GenerationExplanation",
    "ansi_tokens",
    "display_texts",
    "explanation_caption",
    "explanation_html",
    "explanation_text",
    "fit_line",
    "generation_html",
    "generation_text",
    "html_page",
    "html_tokens",
    "normalize",
    "notebook_html",
    "positioned_texts",
    "special_token_mask",
    "supports_color",
    "html_safe",
    "terminal_safe",
    "to_records",
    "visualization_records",
    "word_groups",
]

# 256-colour backgrounds from faint to strong; black text stays readable on all.
_POSITIVE_BG = (194, 157, 120, 84, 46)
_NEGATIVE_BG = (224, 217, 210, 203, 196)
_DIM = "\x1b[2m"
_RESET = "\x1b[0m"
# Word-start markers of SentencePiece and GPT-2 byte-level BPE.
_START_MARKERS = ("▁", "Ġ")
_CONTINUATION_MARKER = "##"  # WordPiece
# Methods a repr lists before "... and N more".
_REPR_METHODS = 8


def _mask_or_none(special_mask: Optional[Sequence[bool]], n: int) -> List[bool]:
    if special_mask is None:
        return [False] * n
    if len(special_mask) != n:
        raise ValueError(
            f"special_mask has {len(special_mask)} entries for {n} tokens; "
            "give one flag per token"
        )
    return [bool(flag) for flag in special_mask]


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
        special_mask (list[bool], optional): ``True`` at the tokenizer's special
            tokens (see :func:`special_token_mask`); they are greyed and kept out
            of the colour scale. Default: no token is special.
        text (str, optional): the input text, shown as a caption.
    """

    tokens: List[str]
    scores: Dict[str, Tensor]
    label_names: List[str]
    pred_class: int
    pred_prob: float
    target: int
    true_class: Optional[int] = None
    special_mask: Optional[List[bool]] = None
    text: Optional[str] = None

    def __post_init__(self) -> None:
        _mask_or_none(self.special_mask, len(self.tokens))

    def label(self, index: Optional[int]) -> str:
        r"""The class name; ``"?"`` for an unknown class (``None`` or negative)."""
        if index is None or index < 0:
            return "?"
        if index < len(self.label_names):
            return self.label_names[index]
        return str(index)

    def specials(self) -> List[bool]:
        r"""One flag per token, ``True`` for special tokens."""
        return _mask_or_none(self.special_mask, len(self.tokens))

    def __repr__(self) -> str:
        r"""A few terminal-safe lines of at most 100 columns:
        the prediction, then each method's top tokens."""
        label = self.label
        head = (
            f"Explanation: prediction {label(self.pred_class)} "
            f"(p={self.pred_prob:.3f}), scores explain {label(self.target)!r}, "
            f"{len(self.tokens)} tokens"
        )
        width = max([len(name) for name in self.scores] + [6])
        lines = [terminal_safe(head)]
        for name, scores in list(self.scores.items())[:_REPR_METHODS]:
            top = _top_tokens(self.tokens, scores, self.specials())
            lines.append(f"  {terminal_safe(name):<{width}}  top: {top}")
        hidden = len(self.scores) - _REPR_METHODS
        if hidden > 0:
            lines.append(f"  ... and {hidden} more method(s)")
        return "\n".join(fit_line(line) for line in lines)

    def _repr_html_(self) -> str:
        r"""In a notebook: the highlighted words of :func:`explanation_html`,
        every token escaped."""
        return notebook_html(explanation_html(self))


def special_token_mask(tokenizer: Any, input_ids: Sequence[int]) -> List[bool]:
    r"""``True`` where ``input_ids`` holds one of the tokenizer's special tokens
    (``tokenizer.all_special_ids``), except the unknown token: ``[UNK]`` stands
    for a real word of the input, so it is scored and coloured like one."""
    special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    return [int(token) in special for token in input_ids]


def normalize(scores: Tensor, special_mask: Optional[Sequence[bool]] = None) -> Tensor:
    r"""Scales ``scores`` by their largest magnitude over the non-special tokens
    (signs kept), so real tokens lie in ``[-1, 1]`` and special tokens may lie
    outside it. All-zero or non-finite scores map to zeros; when every token is
    special, the peak is taken over all of them."""
    scores = torch.nan_to_num(scores.detach().float().cpu(), 0.0, 0.0, 0.0)
    real = ~torch.tensor(_mask_or_none(special_mask, len(scores)), dtype=torch.bool)
    pool = scores[real] if bool(real.any()) else scores
    peak = pool.abs().max() if pool.numel() else torch.tensor(0.0)
    return scores / peak if peak > 0 else torch.zeros_like(scores)


def _word_start_marker(tokens: Sequence[str], specials: List[bool]) -> Optional[str]:
    r"""The row's tokenizer convention: a start marker in use on any real token
    means SentencePiece (``▁``) or byte-level BPE (``Ġ``), otherwise WordPiece
    (``None``)."""
    real = [t for t, s in zip(tokens, specials) if not s]
    return next((m for m in _START_MARKERS if any(t.startswith(m) for t in real)), None)


def _starts_word(token: str, marker: Optional[str]) -> bool:
    if marker is None:
        return not (
            token.startswith(_CONTINUATION_MARKER)
            and len(token) > len(_CONTINUATION_MARKER)
        )
    return token.startswith(marker)


def word_groups(
    tokens: Sequence[str], special_mask: Optional[Sequence[bool]] = None
) -> List[List[int]]:
    r"""Token indices grouped into words (see the module docstring for the
    markers); a special token is always a word of its own."""
    specials = _mask_or_none(special_mask, len(tokens))
    marker = _word_start_marker(tokens, specials)
    groups: List[List[int]] = []
    previous_special = True
    for index, (token, special) in enumerate(zip(tokens, specials)):
        if special or previous_special or _starts_word(token, marker):
            groups.append([index])
        else:
            groups[-1].append(index)
        previous_special = special
    return groups


def _byte_level_alphabet() -> Dict[str, int]:
    r"""GPT-2's byte-level BPE spells each byte as one printable character
    (bytes that are not printable Latin-1 are shifted to U+0100 and up, space
    becoming ``Ġ``); this maps the characters back to the bytes."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = [b for b in range(256) if b not in printable]
    alphabet = {chr(b): b for b in printable}
    alphabet.update({chr(256 + i): b for i, b in enumerate(shifted)})
    return alphabet


_BYTES = _byte_level_alphabet()


def _byte_level_text(token: str) -> str:
    if not all(c in _BYTES for c in token):
        return token
    text = bytes(_BYTES[c] for c in token).decode("utf-8", errors="replace")
    return text.lstrip(" ").replace("\n", "⏎") or "␣"


def display_texts(
    tokens: Sequence[str], special_mask: Optional[Sequence[bool]] = None
) -> List[str]:
    r"""Each token as it reads in its word: WordPiece ``##`` and SentencePiece
    ``▁`` stripped; byte-level BPE pieces decoded from their byte alphabet
    (``Ġ`` is a space, "âĢĻ" is "’"); special tokens unchanged."""
    specials = _mask_or_none(special_mask, len(tokens))
    marker = _word_start_marker(tokens, specials)
    texts = []
    for token, special in zip(tokens, specials):
        if special:
            texts.append(token)
        elif marker == "Ġ":
            texts.append(_byte_level_text(token))
        else:
            prefix = marker or _CONTINUATION_MARKER
            strip = token.startswith(prefix) and len(token) > len(prefix)
            texts.append(token[len(prefix) :] if strip else token)
    return texts


def terminal_safe(text: str) -> str:
    r"""Every character that is not printable (control characters such as ESC,
    BEL and NUL, bidi overrides such as U+202E, line separators) shown as a
    visible escape (``\x1b``, ``\u202e``), so a token, a text or a class name
    can neither emit terminal escape sequences nor silently reorder what is
    shown around it."""
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(character: str) -> str:
    return character.encode("unicode_escape").decode("ascii")


def html_safe(text: str) -> str:
    r""":func:`terminal_safe`, then HTML-escaped: text from data or a model as
    it goes into a page."""
    return html.escape(terminal_safe(text))


def supports_color(stream: TextIO) -> bool:
    r"""ANSI colour only on a terminal, never with ``NO_COLOR`` set
    (https://no-color.org) or ``TERM=dumb``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _level(value: float) -> int:
    return min(len(_POSITIVE_BG) - 1, int(abs(value) * len(_POSITIVE_BG)))


def _ansi_piece(text: str, value: float, special: bool, color: bool) -> str:
    text = terminal_safe(text)
    if special:
        return f"{_DIM}{text}{_RESET}" if color else text
    if not color:
        return f"{text}[{value:+.2f}]"
    if abs(value) < 0.05:
        return text
    palette = _POSITIVE_BG if value > 0 else _NEGATIVE_BG
    return f"\x1b[30;48;5;{palette[_level(value)]}m{text}{_RESET}"


def ansi_tokens(
    tokens: Sequence[str],
    scores: Tensor,
    color: bool,
    special_mask: Optional[Sequence[bool]] = None,
) -> str:
    r"""One line of words: coloured backgrounds per piece (green = supports the
    target class, red = against) when ``color``, else each piece followed by its
    score in ``[-1, 1]`` so the line stays readable in logs and pipes. Special
    tokens are dim (plain without colour) and carry no score."""
    specials = _mask_or_none(special_mask, len(tokens))
    values = normalize(scores, specials).tolist()
    texts = display_texts(tokens, specials)
    words = [
        "".join(_ansi_piece(texts[i], values[i], specials[i], color) for i in group)
        for group in word_groups(tokens, specials)
    ]
    return " ".join(words)


NO_POSITIVE_EVIDENCE = "no positive evidence"


def _top_positive(
    scores: Tensor, specials: List[bool], k: int, above: float = 0.0
) -> List[int]:
    r"""The positions of the (at most) ``k`` highest scores above ``above``
    (>= 0) among the real tokens, highest first: a token scored zero or less
    is no evidence for the target, so an all-zero row has no "top" (ties keep
    position order)."""
    order = torch.sort(scores, descending=True, stable=True).indices.tolist()
    return [i for i in order if not specials[i] and float(scores[i]) > above][:k]


def positioned_texts(texts: Sequence[str]) -> List[str]:
    r"""Each text, with ``@position`` appended where the same text occurs more
    than once (``k1@3``), so a repeated token says which occurrence is meant."""
    counts: Dict[str, int] = {}
    for text in texts:
        counts[text] = counts.get(text, 0) + 1
    return [f"{t}@{i}" if counts[t] > 1 else t for i, t in enumerate(texts)]


def _top_tokens(
    tokens: Sequence[str], scores: Tensor, specials: List[bool], k: int = 3
) -> str:
    values = normalize(scores, specials)
    # Printed to two decimals: a score that would read +0.00 is no "top" either.
    top = _top_positive(values, specials, k, above=0.005)
    texts = positioned_texts(display_texts(tokens, specials))
    shown = [f"{terminal_safe(texts[i])} ({values[i]:+.2f})" for i in top]
    return ", ".join(shown) or NO_POSITIVE_EVIDENCE


def explanation_text(explanation: Explanation, color: bool) -> str:
    r"""The terminal report of ``explain``: prediction, then one highlighted line
    and the top tokens per method. Class and method names are sanitised."""
    label = explanation.label
    width = max([len(name) for name in explanation.scores] + [6])
    lines = [
        f"prediction: {terminal_safe(label(explanation.pred_class))} "
        f"(p={explanation.pred_prob:.3f}); scores explain class "
        f"{terminal_safe(repr(label(explanation.target)))}",
    ]
    if explanation.true_class is not None:
        lines.append(f"true class: {terminal_safe(label(explanation.true_class))}")
    lines.append(
        "legend: green/+ supports the class, red/- speaks against it; each row "
        "scaled by its largest magnitude over real tokens (special tokens are "
        "dim and unscored)"
    )
    specials = explanation.specials()
    for name, scores in explanation.scores.items():
        shown = f"{terminal_safe(name):<{width}}"
        lines.append(
            f"{shown}  {ansi_tokens(explanation.tokens, scores, color, specials)}"
        )
        top = _top_tokens(explanation.tokens, scores, specials)
        lines.append(f"{'':<{width}}  top: {top}")
    return "\n".join(lines)


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


def fit_line(line: str, width: int = 100) -> str:
    r"""``line`` cut to ``width`` columns, ending in "…" when cut."""
    return line if len(line) <= width else line[: width - 1] + "…"


def html_page(title: str, body: str) -> str:
    r"""A self-contained page (inline CSS, no external resources)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html_safe(title)}</title><style>{_CSS}</style></head>"
        f"<body><h1>{html_safe(title)}</h1>\n{body}\n</body></html>\n"
    )


def explanation_caption(explanation: Explanation) -> str:
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


def explanation_html(explanation: Explanation, text: Optional[str] = None) -> str:
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


def _word_scores(
    groups: List[List[int]], scores: Tensor, specials: List[bool]
) -> Tensor:
    r"""Each word's score: the sum of its pieces' scores (attributions add up),
    scaled over the real words; special words get 0 (Captum has no grey)."""
    raw = torch.nan_to_num(scores.detach().float().cpu(), 0.0, 0.0, 0.0)
    summed = torch.stack([raw[group].sum() for group in groups])
    word_special = [specials[group[0]] for group in groups]
    scaled = normalize(summed, word_special)
    return scaled.masked_fill(torch.tensor(word_special, dtype=torch.bool), 0.0)


def visualization_records(
    explanation: Explanation,
) -> List[captum_viz.VisualizationDataRecord]:
    r"""One Captum ``VisualizationDataRecord`` per method, for
    ``captum.attr.visualization.visualize_text``.

    ``raw_input_ids`` are whole words (pieces joined), HTML-escaped, because
    ``visualize_text`` inserts them into its markup as they are (captum issue
    #1226). ``word_attributions`` are each word's summed piece scores scaled
    into ``[-1, 1]`` over the real words (Captum's colour range); special
    tokens get ``0`` (uncoloured). ``attr_score`` is the sum of the unscaled
    scores, ``attr_class`` names the method and the explained class,
    ``convergence_score`` is ``nan`` (only Integrated Gradients has one).
    """
    specials = explanation.specials()
    groups = word_groups(explanation.tokens, specials)
    texts = display_texts(explanation.tokens, specials)
    words = [html_safe("".join(texts[i] for i in group)) for group in groups]
    label = explanation.label
    return [
        captum_viz.VisualizationDataRecord(
            word_attributions=_word_scores(groups, scores, specials),
            pred_prob=float(explanation.pred_prob),
            pred_class=html_safe(label(explanation.pred_class)),
            true_class=html_safe(label(explanation.true_class)),
            attr_class=html_safe(f"{name}: {label(explanation.target)}"),
            attr_score=float(scores.sum()),
            raw_input_ids=words,
            convergence_score=float("nan"),
        )
        for name, scores in explanation.scores.items()
    ]


def to_records(
    tokenizer: Any,
    input_ids: Tensor,
    attributions: Tensor,
    *,
    attention_mask: Optional[Tensor] = None,
    logits: Optional[Tensor] = None,
    target: Optional[Tensor] = None,
    true_class: Optional[Sequence[int]] = None,
    label_names: Optional[Sequence[str]] = None,
    method: str = "attribution",
) -> List[captum_viz.VisualizationDataRecord]:
    r"""Captum records for your own tensors, one per example::

        scores = AttCAT(model).attribute(input_ids, additional_forward_args=(mask,))
        records = to_records(tokenizer, input_ids, scores, attention_mask=mask)
        captum.attr.visualization.visualize_text(records)  # pip install ".[viz]"

    Pads (``attention_mask == 0``) are dropped, the tokenizer's special tokens
    greyed out of the scale and word pieces joined (see
    :func:`visualization_records`).

    Args:
        tokenizer (PreTrainedTokenizerBase): the tokenizer that made
            ``input_ids`` (``convert_ids_to_tokens``, ``all_special_ids``).
        input_ids (Tensor): ``[batch, seq]`` token ids.
        attributions (Tensor): ``[batch, seq]`` scores, e.g. any captum_ext
            method's output.
        attention_mask (Tensor, optional): ``[batch, seq]``; default all ones.
        logits (Tensor, optional): ``[batch, classes]`` model outputs, for the
            predicted class and its probability. Default: unknown (``nan``).
        target (Tensor, optional): ``[batch]`` explained classes. Default: the
            predicted class when ``logits`` are given.
        true_class (Sequence[int], optional): gold classes, if known.
        label_names (Sequence[str], optional): class names (e.g. from
            ``model.config.id2label``). Default: class indices.
        method (str, optional): the name shown in the records. Default:
            ``"attribution"``.

    Returns:
        list[VisualizationDataRecord]: one record per example.
    """
    if input_ids.shape != attributions.shape:
        raise ValueError(
            f"input_ids {tuple(input_ids.shape)} and attributions "
            f"{tuple(attributions.shape)} must have the same [batch, seq] shape"
        )
    mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
    probs = None if logits is None else logits.detach().float().softmax(-1).cpu()
    records = []
    for row in range(input_ids.shape[0]):
        valid = mask[row].bool()
        ids = input_ids[row, valid].tolist()
        predicted = -1 if probs is None else int(probs[row].argmax())
        explained = predicted if target is None else int(target[row])
        explanation = Explanation(
            tokens=tokenizer.convert_ids_to_tokens(ids),
            scores={method: attributions[row, valid]},
            label_names=list(label_names or []),
            pred_class=predicted,
            pred_prob=float("nan") if probs is None else float(probs[row, predicted]),
            target=explained,
            true_class=None if true_class is None else int(true_class[row]),
            special_mask=special_token_mask(tokenizer, ids),
        )
        records += visualization_records(explanation)
    return records


@dataclass
class GenerationExplanation:
    r"""A prompt, the continuation a causal LM generated (or was given), and
    every method's target x prompt scores.

    Args:
        prompt_tokens (list[str]): the prompt's tokens ``[P]``.
        target_tokens (list[str]): the continuation's tokens ``[T]``.
        scores (dict[str, Tensor]): method name -> ``[T, P]``: row ``t``
            explains :math:`\log p(y_t \mid \text{prompt}, y_{<t})`.
        prompt (str): the prompt as given.
        continuation (str): the continuation's text.
        generated (bool): True when the model generated the continuation.
        special_mask (list[bool], optional): ``True`` at the prompt's special
            tokens (BOS, a chat template's markers); greyed and kept out of
            the colour scale. Default: no token is special.
        prompt_unit (str, optional): what a prompt column is: ``"token"``, or
            a source (``"sentence"``, ``"line"``) whose text ``prompt_tokens``
            holds as written and whose score sums its tokens'. Default:
            ``"token"``
        evidence (list[int], optional): per target token, the prompt position
            known to decide it (planted evidence; -1: none), outlined in the
            heatmaps. Default: none known.
    """

    prompt_tokens: List[str]
    target_tokens: List[str]
    scores: Dict[str, Tensor]
    prompt: str
    continuation: str
    generated: bool
    special_mask: Optional[List[bool]] = None
    prompt_unit: str = "token"
    evidence: Optional[List[int]] = None

    def specials(self) -> List[bool]:
        r"""One flag per prompt token, ``True`` for special tokens."""
        return _mask_or_none(self.special_mask, len(self.prompt_tokens))

    def prompt_texts(self) -> List[str]:
        r"""Each prompt column as it reads: a token in its word
        (:func:`display_texts`), a source's own text."""
        if self.prompt_unit != "token":
            return list(self.prompt_tokens)
        return display_texts(self.prompt_tokens, self.specials())

    def __repr__(self) -> str:
        r"""The head of :func:`generation_text` (prompt, continuation, the
        first method's rows), each line terminal-safe and at most 100
        columns."""
        lines = generation_text(self).splitlines()
        shown = lines[:_REPR_GENERATION_LINES]
        if len(lines) > len(shown):
            shown.append(f"  ... {len(lines) - len(shown)} more line(s)")
        return "\n".join(fit_line(line) for line in shown)

    def _repr_html_(self) -> str:
        r"""In a notebook: the target x prompt heatmaps of
        :func:`generation_html`, every token escaped."""
        return notebook_html(generation_html(self))


_REPR_GENERATION_LINES = 12


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


def generation_text(explanation: GenerationExplanation, k: int = 3) -> str:
    r"""The terminal report of ``explain-generation``: the prompt, the
    continuation, then per method each target token with its ``k`` top prompt
    tokens and their raw scores (only positive scores count as evidence: "no
    positive evidence" where none is; a repeated prompt token carries its
    position, ``k1@3``). Every string is terminal-safe."""
    specials = explanation.specials()
    prompt = positioned_texts(explanation.prompt_texts())
    targets = [terminal_safe(t) for t in display_texts(explanation.target_tokens)]
    width = max([len(t) for t in targets] + [1])
    kind = "generated" if explanation.generated else "given"
    lines = [
        f"prompt: {terminal_safe(explanation.prompt)}",
        f"{kind}: {terminal_safe(explanation.continuation)}",
        f"each target token: its top prompt {explanation.prompt_unit}s (score for "
        "log p of the token)",
    ]
    for name, scores in explanation.scores.items():
        lines.append(f"{terminal_safe(name)}:")
        for target, row in zip(targets, scores):
            top = ", ".join(
                f"{terminal_safe(prompt[i])} ({float(row[i]):+.3g})"
                for i in _top_positive(row, specials, k)
            )
            lines.append(f"  {target:<{width}}  {top or NO_POSITIVE_EVIDENCE}")
    return "\n".join(lines)


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


def _heatmap(
    explanation: GenerationExplanation, scores: Tensor, prompt: List[str]
) -> str:
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


def generation_html(explanation: GenerationExplanation, heading: int = 2) -> str:
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
    real = torch.tensor([not s for s in specials], dtype=torch.bool)
    for name, scores in explanation.scores.items():
        values = scores[:, real]  # [T, real prompt tokens]
        flat = values.numel() > 0 and bool((values == values[:, :1]).all())
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
