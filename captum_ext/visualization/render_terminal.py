#!/usr/bin/env python3
r"""Terminal views: highlighted token lines (:func:`ansi_tokens`), the reports of
``explain`` (:func:`explanation_text`) and ``explain-generation``
(:func:`generation_text`); every string terminal-safe."""

import os
from typing import List, Optional, Sequence, TextIO

import torch
from torch import Tensor

from captum_ext.visualization.escaping import terminal_safe
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
    "NO_POSITIVE_EVIDENCE",
    "ansi_tokens",
    "explanation_text",
    "fit_line",
    "generation_text",
    "supports_color",
]

# 256-colour backgrounds from faint to strong; black text stays readable on all.
_POSITIVE_BG = (194, 157, 120, 84, 46)
_NEGATIVE_BG = (224, 217, 210, 203, 196)
_DIM = "\x1b[2m"
_RESET = "\x1b[0m"


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


def _top_tokens(
    tokens: Sequence[str], scores: Tensor, specials: List[bool], k: int = 3
) -> str:
    values = normalize(scores, specials)
    # Printed to two decimals: a score that would read +0.00 is no "top" either.
    top = _top_positive(values, specials, k, above=0.005)
    texts = positioned_texts(display_texts(tokens, specials))
    shown = [f"{terminal_safe(texts[i])} ({values[i]:+.2f})" for i in top]
    return ", ".join(shown) or NO_POSITIVE_EVIDENCE


def explanation_text(explanation: ExplanationFields, color: bool) -> str:
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


def fit_line(line: str, width: int = 100) -> str:
    r"""``line`` cut to ``width`` columns, ending in "…" when cut."""
    return line if len(line) <= width else line[: width - 1] + "…"


def generation_text(explanation: GenerationFields, k: int = 3) -> str:
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
