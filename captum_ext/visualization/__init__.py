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

The records are in :mod:`~captum_ext.visualization.records`, the token rules in
:mod:`~captum_ext.visualization.tokens` and
:mod:`~captum_ext.visualization.escaping`, the views in
:mod:`~captum_ext.visualization.render_terminal` and
:mod:`~captum_ext.visualization.render_html`, the export to Captum's visualizer
in :mod:`~captum_ext.visualization.captum_records`; every public name is
importable from this package.
"""

from captum_ext.visualization.captum_records import to_records, visualization_records
from captum_ext.visualization.escaping import html_safe, terminal_safe
from captum_ext.visualization.patches import patch_grid, patch_pixels
from captum_ext.visualization.records import Explanation, GenerationExplanation
from captum_ext.visualization.render_html import (
    explanation_caption,
    explanation_html,
    generation_html,
    HEATMAP_COLUMNS,
    html_page,
    html_tokens,
    notebook_html,
)
from captum_ext.visualization.render_terminal import (
    ansi_tokens,
    explanation_text,
    fit_line,
    generation_text,
    NO_POSITIVE_EVIDENCE,
    supports_color,
)
from captum_ext.visualization.tokens import (
    display_texts,
    normalize,
    positioned_texts,
    special_token_mask,
    word_groups,
)

__all__ = [
    "Explanation",
    "GenerationExplanation",
    "HEATMAP_COLUMNS",
    "NO_POSITIVE_EVIDENCE",
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
    "patch_grid",
    "patch_pixels",
    "positioned_texts",
    "special_token_mask",
    "supports_color",
    "html_safe",
    "terminal_safe",
    "to_records",
    "visualization_records",
    "word_groups",
]
