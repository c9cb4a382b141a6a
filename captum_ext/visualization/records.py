#!/usr/bin/env python3
r"""The records the views show: :class:`Explanation` (one input's prediction and
every method's token scores) and :class:`GenerationExplanation` (a prompt, its
continuation and every method's target x prompt scores), each with its terminal
``repr`` and its notebook view."""

from dataclasses import dataclass
from typing import Dict, List, Optional

from torch import Tensor

from captum_ext.visualization.escaping import terminal_safe
from captum_ext.visualization.render_html import (
    explanation_html,
    generation_html,
    notebook_html,
)
from captum_ext.visualization.render_terminal import (
    _top_tokens,
    fit_line,
    generation_text,
)
from captum_ext.visualization.tokens import _mask_or_none, display_texts

__all__ = ["Explanation", "GenerationExplanation"]

# Methods a repr lists before "... and N more".
_REPR_METHODS = 8


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
