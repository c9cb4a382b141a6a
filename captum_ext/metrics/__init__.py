#!/usr/bin/env python3
r"""Faithfulness and plausibility metrics for token attributions, in the manner of
:mod:`captum.metrics`.

Faithfulness (perturbation curves): :func:`aopc`, :func:`log_odds`,
:func:`sufficiency`, :func:`hiding_revealing`; of explanations of generated
text: :func:`generation_aopc`, :func:`generation_sufficiency`,
:func:`generation_log_odds`, :func:`generation_soft_nc`,
:func:`generation_soft_ns`. Class sensitivity:
:func:`kendall_tau`, :func:`token_overlap`. Plausibility against known evidence:
:func:`average_precision`, :func:`dot_product`. Captum's own
:func:`captum.metrics.infidelity` and :func:`captum.metrics.sensitivity_max`
run on token ids with :class:`TokenSubsetPerturbation` as their
``perturb_func``. On a vision transformer's images, :class:`PatchTokens`
gives every one of them patch tokens to mask. Each has one clean default,
documented in its docstring, and presets reproducing the papers' protocols
(``preset="attcat"``, ``"normxlogit"``, ``"decoded"``, ``"ferret"``), all in
one typed table (:func:`get_protocol`). The tokenizer's ids go in one
:class:`TokenOptions` (``tokens=TokenOptions.from_tokenizer(tokenizer)``).

.. _metric-arguments:

.. rubric:: Arguments every metric shares

Every metric takes Captum's leading arguments in Captum's order, its options
keyword-only. Each metric's docstring lists all its arguments, as Captum's
do; the ones below mean the same wherever they are taken:

forward_func (Callable)
    ``forward_func(input_ids, attention_mask, *rest) -> logits [batch, C]``,
    e.g. :func:`captum_ext.classifier_forward`; a module runs in eval mode. Run
    on the inputs (for the predicted class and the number of classes) and, by
    the perturbation-curve metrics, on every perturbed level.
inputs (Tensor)
    token ids ``[batch, pos]``, padded left or right.
attributions (Tensor)
    one score per token ``[batch, pos]``; higher = more important for
    ``target``, where the metric has one. Sum embedding-level attributions over
    their last dimension first.
additional_forward_args (Tensor or tuple, optional)
    ``attention_mask`` or ``(attention_mask, *rest)``, passed to
    ``forward_func`` after the ids (the plausibility metrics read only the
    mask); ``[batch, pos]`` tensors follow their tokens when tokens are
    deleted. Default: None (no padding)
tokens (TokenOptions, optional)
    the [MASK], [PAD] and special ids (:class:`TokenOptions`). Special
    positions are never perturbed, ranked or counted, unless a preset says
    otherwise. Default: None (no special position)
internal_batch_size (int, optional)
    most rows per forward pass: examples, or (example, level) pairs of every
    curve; results do not depend on it. Default: None (the batch size)
show_progress (bool, optional)
    progress on stderr: a bar on a terminal, plain lines with the time left in
    a log. Default: False

.. _metric-presets:

.. rubric:: The papers' protocols of the perturbation curves

Each preset reproduces the authors' reference code; :func:`get_protocol` holds
it as a typed record. The default of each metric is in its docstring.

:func:`aopc`
    - ``"attcat"`` (AttCAT, Qiang et al., NeurIPS 2022,
      https://github.com/qiangyao1988/AttCAT, ``cal_aopc``): :math:`g \in`
      ``np.linspace(0, 1, 10)[1:]`` (nine multiples of 1/9, 100 % included);
      :math:`k = \mathrm{round}(g \cdot n)` with :math:`n` counting special
      tokens; special tokens and the lowest-ranked real token are never
      removed; deletion; :math:`|p - \tilde p|`. Examples with :math:`n < 10`
      are skipped: their score and curve are NaN (use ``torch.nanmean``). The
      reference tracks the gold label: pass ``target=labels``.
    - ``"normxlogit"`` (Comp_CD of NormXLogit, Abbasi et al., EMNLP 2025,
      https://github.com/sinaabbasi1/NormXLogit): :math:`g \in \{0.1, \dots,
      0.9\}`; :math:`k = \lfloor g \cdot n \rfloor` with :math:`n` counting
      special tokens; every real token but the first ([CLS]) may be perturbed,
      [SEP] included; [MASK] replacement with the attention mask kept
      (``tokens.mask_token_id`` required); signed.
    - ``"ferret"`` (``aopc_compr`` of ferret 0.5, Attanasio et al., 2023,
      https://github.com/g8a9/ferret): thresholds ``np.arange(0.1, 1.1, 0.1)``;
      :math:`v = \lfloor g \cdot n \rfloor` of the non-special tokens; only the
      positive-scored tokens among the top :math:`v` are deleted; a level that
      would delete nothing or the same tokens as the previous level is skipped
      (NaN in the curve, left out of the mean); score 0 when every level is
      skipped; signed. ferret decodes the remaining tokens and re-tokenises
      them, and protects only the first and last token; here token ids are
      deleted directly and every special token is protected.
:func:`log_odds`
    - ``"attcat"`` (AttCAT, Qiang et al., NeurIPS 2022, Eq. 14,
      https://github.com/qiangyao1988/AttCAT, ``cal_logodds``): the AOPC
      ``"attcat"`` protocol (nine levels ``np.linspace(0, 1, 10)[1:]``,
      :math:`k = \mathrm{round}(g \cdot n)` with :math:`n` counting special
      tokens, special tokens and the lowest-ranked real token never replaced,
      examples with :math:`n < 10` NaN) with [PAD] replacement and the
      attention mask left on (``tokens.pad_token_id`` required). The reference tracks
      the gold label: pass ``target=labels``.
:func:`sufficiency`
    - ``"normxlogit"`` (NormXLogit, Abbasi et al., EMNLP 2025,
      https://github.com/sinaabbasi1/NormXLogit): :math:`g \in \{0.1, \dots,
      0.9\}`; :math:`k = \lfloor g \cdot n \rfloor` with :math:`n` counting
      special tokens; every real token but the first ([CLS]) outside the top
      :math:`k` is replaced by [MASK], [SEP] included, attention mask kept
      (``tokens.mask_token_id`` required); signed.
    - ``"ferret"`` (``aopc_suff`` of ferret 0.5,
      https://github.com/g8a9/ferret): thresholds ``np.arange(0.1, 1.1, 0.1)``;
      the kept tokens are the positive-scored ones among the top
      :math:`\lfloor g \cdot n \rfloor` non-special tokens; every other
      non-special token is deleted; levels keeping nothing or the same tokens
      as the previous level are skipped (NaN, left out of the mean); score 1
      when every level is skipped; signed.

.. _generation-metric-arguments:

.. rubric:: Arguments every generation metric shares

The faithfulness of an explanation of generated text
(:func:`generation_aopc`, :func:`generation_sufficiency`,
:func:`generation_log_odds`, :func:`generation_soft_nc`,
:func:`generation_soft_ns`; definitions and choices in the
"Faithfulness of explanations of generated text" page) is measured on the
teacher-forced log-probability of each target token,
:math:`\log p(y_t \mid x, y_{<t})`, in float32 (float64 for a float64 model);
each returns a :class:`GenerationMetricResult` (one value per target token and
their sum).

forward_func (Callable)
    a causal LM's ``forward_func(input_ids, attention_mask) -> logits [batch,
    pos, vocab]``: :func:`captum_ext.causal_lm_forward` ``(model)`` (position
    ids from the mask, so re-packed prompts get their own positions).
inputs (Tensor)
    prompt token ids ``[batch, P]``, padded on the left.
attributions (Tensor)
    ``[batch, T, P]``, one row per target token (a method's result on a causal
    LM; only the prompt's columns), or ``[batch, P]``, one ranking for the
    whole continuation (e.g. Captum's ``seq_attr``).
target (Tensor)
    the continuation's ids ``[batch, T]``, right-padded with -100.
additional_forward_args (Tensor or tuple, optional)
    ``attention_mask`` or ``(attention_mask,)``. Default: None (no padding)
tokens (TokenOptions, optional)
    the special ids (BOS, chat-template tokens: never perturbed, ranked or
    counted) and, for replacement, the replacement id as ``mask_token_id``.
    Default: None (no special position)
internal_batch_size (int, optional)
    most rows (prompts, or perturbed prompt x target rows) per forward pass;
    results do not depend on it. Default: None (the batch size)
show_progress (bool, optional)
    progress on stderr: a bar on a terminal, plain lines with the time left in
    a log. Default: False

.. _soft-erasure:

.. rubric:: Soft erasure (generation_soft_nc, generation_soft_ns)

Zhao & Aletras, "Incorporating Attribution Importance for Improving Faithfulness
Metrics", ACL 2023, Sec. 3, https://aclanthology.org/2023.acl-long.261/
(https://arxiv.org/abs/2305.10496): every element of the word embedding of
prompt token :math:`i` is kept or zeroed independently, :math:`x'_i = x_i \odot
e_i`, :math:`e_i \in \{0, 1\}^d`, with :math:`s_i \in [0, 1]` the attribution of
:math:`x_i` min-max normalised over the row's non-special prompt tokens (0.5 for
all when they are equal). Special tokens (BOS, chat-template tokens:
``tokens``), the positions and the continuation :math:`y_{<t}` are never
perturbed. Per target token :math:`y_t` the attribution row of :math:`y_t` gives
:math:`s` (a ``[batch, P]`` attribution: one :math:`s` for all targets), and
:math:`p(\cdot) = p(y_t \mid \cdot, y_{<t})` under teacher forcing.

The normaliser is the sufficiency of the empty prompt, :math:`S(x, 0) = 1 -
\max(0, p(x) - p(0))`, where :math:`0` is the prompt with every non-special word
embedding zeroed (the soft erasure at :math:`s = 0`); the result is clipped to
[0, 1] as in the authors' code (https://github.com/casszhao/SoftFaith,
``src/common_code/metrics.py``), and NaN where :math:`p(0) \ge p(x)` (the empty
prompt already explains the target: the normaliser is 0). ``score`` is the mean
over ``n_samples`` draws (the paper takes one); draw ``j`` of ranking row ``r``
(``r = b * R + t``, ``R`` = ``T`` or 1) uses ``torch.Generator`` seeded with
``hash((seed, r, j))``, so results do not depend on padding or
``internal_batch_size``. ``forward_func`` must be
:func:`captum_ext.causal_lm_forward` ``(model)``: the soft metrics perturb its
word embeddings.
"""

from captum_ext.metrics._core.aopc import aopc
from captum_ext.metrics._core.average_precision import average_precision
from captum_ext.metrics._core.dot_product import dot_product
from captum_ext.metrics._core.generation_aopc import generation_aopc
from captum_ext.metrics._core.generation_log_odds import generation_log_odds
from captum_ext.metrics._core.generation_soft_nc import generation_soft_nc
from captum_ext.metrics._core.generation_soft_ns import generation_soft_ns
from captum_ext.metrics._core.generation_sufficiency import generation_sufficiency
from captum_ext.metrics._core.hiding_revealing import hiding_revealing
from captum_ext.metrics._core.kendall_tau import kendall_tau
from captum_ext.metrics._core.log_odds import log_odds
from captum_ext.metrics._core.patch_tokens import PatchTokens
from captum_ext.metrics._core.sufficiency import sufficiency
from captum_ext.metrics._core.token_overlap import token_overlap
from captum_ext.metrics._core.token_subset_perturbation import TokenSubsetPerturbation
from captum_ext.metrics._utils.generation_results import GenerationMetricResult
from captum_ext.metrics._utils.inputs import TokenOptions
from captum_ext.metrics._utils.protocols import (
    get_protocol,
    KendallProtocol,
    PerturbationProtocol,
)
from captum_ext.metrics._utils.results import (
    HidingRevealingResult,
    MetricResult,
    TokenOverlapResult,
)

__all__ = [
    "GenerationMetricResult",
    "HidingRevealingResult",
    "KendallProtocol",
    "MetricResult",
    "PatchTokens",
    "PerturbationProtocol",
    "TokenOptions",
    "TokenOverlapResult",
    "TokenSubsetPerturbation",
    "aopc",
    "average_precision",
    "dot_product",
    "generation_aopc",
    "generation_log_odds",
    "generation_soft_nc",
    "generation_soft_ns",
    "generation_sufficiency",
    "get_protocol",
    "hiding_revealing",
    "kendall_tau",
    "log_odds",
    "sufficiency",
    "token_overlap",
]
