#!/usr/bin/env python3
r"""CAT: class activation tokens, gradient times hidden state summed over layers."""

from contextlib import nullcontext
from functools import partial
from typing import Any, Callable, List, Optional, Tuple, Union

import torch
from captum._utils.typing import ModuleOrModuleList, TargetType
from captum.attr._utils.attribution import GradientAttribution
from torch import Tensor

from captum_ext._utils.attention_inputs import AttentionInputs
from captum_ext._utils.hooks import gradients_from, HookSet, single_call
from captum_ext._utils.log import log_usage
from captum_ext._utils.model_forward import run_model
from captum_ext._utils.positive_int import check_positive_int
from captum_ext._utils.teacher_forcing import (
    IGNORE_INDEX,
    predicted_log_probs,
    TeacherForcedBatch,
)
from captum_ext._utils.token_batch import TokenBatch
from captum_ext.adapters import ModelAdapter
from captum_ext.attr._core.layer.cat import CAT as LayerCAT
from captum_ext.attr._utils.block_recomputation import BlockRecomputation, Site
from captum_ext.attr._utils.gradient_times_state import (
    gradient_times_state,
    gradients_times_states,
)
from captum_ext.attr._utils.recomputed_scores import check_recompute, recomputed_scores
from captum_ext.attr._utils.result_dtype import result_dtype
from captum_ext.attr._utils.teacher_forced_attribution import (
    run_teacher_forced,
    target_gradients,
)
from captum_ext.attr._utils.token_attribution import TokenAttribution

__all__ = ["CAT"]

_LAYERS = ("inputs", "outputs", "attention_inputs")
# Causal LMs: what row t differentiates (``objective``).
OBJECTIVES = ("log_prob", "logit")


class CAT(TokenAttribution, LayerCAT):
    r"""
    Class Activation Tokens (CAT) score token :math:`i` with the gradient of the
    target logit :math:`y^c` (before softmax) times the token's hidden state,
    summed over the hidden dimension and over layers:

    .. math::
        \mathrm{CAT}_i^l = \sum_d \left(\frac{\partial y^c}{\partial h_i^l}
        \odot h_i^l\right)_d, \qquad \mathrm{CAT}_i = \sum_l \mathrm{CAT}_i^l

    :math:`c` is the target class, by default the model's predicted class. The
    scores keep their sign (the sign is the direction of the evidence).

    Which hidden states :math:`h^l` are used:

    - ``layers="inputs"`` (the default on classifiers, the AttCAT authors'
      code): the inputs of the L blocks, ``hidden_states[0..L-1]``;
    - ``layers="outputs"`` (the AttCAT paper's Eq. 10): the outputs of the L
      blocks, ``hidden_states[1..L]``;
    - ``layers="attention_inputs"`` (the default on causal LMs): what each
      block's attention reads. In a post-LN encoder (BERT, the paper's models)
      that is the block's input ``hidden_states[l-1]``, a LayerNorm output:
      the same as ``"inputs"``. In a pre-LN decoder (GPT-2, Llama, ...) it is
      the block's first norm's output :math:`\mathrm{norm}_1(h^{l-1})`. The
      residual stream reaches other positions only through such norms,
      invariant to its scale up to :math:`\epsilon`: at the last block's input
      :math:`\sum_d (\partial y / \partial h_i) \odot h_i` is close to 0 at
      every position but the predicting one (at its output exactly 0), and at
      earlier blocks it sees only how :math:`h_i` mixes with what later blocks
      add. The norm's output, like BERT's hidden states, is what attention
      reads (docs/generation.rst, "Choosing the causal-LM definitions").

    CAT is the AttCAT ablation without attention weights (:class:`AttCAT` with
    :math:`\alpha \equiv 1`); neither the paper nor its code defines it exactly,
    so this is the project's reading. One forward and one backward pass per
    chunk of ``internal_batch_size`` examples (one for the whole batch by
    default); works with frozen parameters and leaves every ``.grad``
    untouched. Precision (CONTRIBUTING, "Precision policy"): the forward and
    backward passes run in the model's dtype; the sum over :math:`d`, whose
    terms cancel strongly after a LayerNorm, is accumulated in float32, and
    scores are returned in float32 (float64 for a float64 model).
    With bfloat16 post-LN encoders (BERT family) scores are still only
    approximate (relative error of 10-60 % on small random models), as the
    bfloat16 gradients cannot resolve a sum that cancels to about 1e-3 of its
    terms; use float32 where values matter.

    **Causal LMs** (``*ForCausalLM``; docs/generation.rst): ``target`` is the
    continuation ``y_1..y_T`` ``[batch, T]`` and row :math:`t` of the result
    ``[batch, T, P]`` differentiates :math:`\log p(y_t \mid \text{prompt},
    y_{<t})` (log-softmax in float32; minus :math:`\log p(y'_t)` with a
    contrast target) instead of a class logit:

    .. math::
        \mathrm{CAT}_{t,i} = \sum_l \sum_d \left(\frac{\partial \log
        p(y_t)}{\partial h_i^l} \odot h_i^l\right)_d

    All T rows come from one teacher-forced forward pass and backward passes
    (no forward pass per target): one per target step on a CPU and on long
    prompts, up to 16 steps batched into one pass on short prompts on an
    accelerator (``targets_per_backward``). With ``recompute`` (by default on
    a CPU, and on an accelerator where the whole graph would take more than
    half the free memory) the forward pass keeps no graph, only each block's
    input, and the backward passes go through one recomputed block at a
    time from the top down, carrying every step's gradient: the same scores
    in the memory of one block's graph (docs/generation.rst, "Per-block
    recomputation").

    ``objective="logit"`` differentiates :math:`\mathrm{logits}_{p_t}[y_t]`
    (minus :math:`\mathrm{logits}_{p_t}[y'_t]`) instead, the classifiers'
    quantity: it leaves out the log-sum-exp over the vocabulary, so the scores
    say what raises :math:`y_t`'s logit, not what lowers its competitors'. Both
    keep the consistency law (the objective is read at :math:`p_t`).

    More details can be found in the AttCAT paper and the authors' code, cited
    in :class:`AttCAT`.
    """

    explains_generation = True
    needs_gradients = True

    def __init__(
        self,
        forward_func: Callable[..., Any],
        layer: Optional[ModuleOrModuleList] = None,
        attribute_to_layer_input: bool = False,
        *,
        layers: Optional[str] = None,
        objective: str = "log_prob",
    ) -> None:
        r"""
        Args:

            forward_func (Callable): The forward function of the model: with
                        ``layer``, ``forward_func(inputs, *additional_forward_args)
                        -> [batch, C]`` (e.g. logits; a module runs in eval
                        mode), whatever the inputs are (token ids, embeddings,
                        pixel values). Without ``layer``, a Hugging Face
                        transformer of a family supported by
                        :func:`captum_ext.get_adapter` (the shortcut, which
                        finds the layers and also explains causal LMs).
            layer (torch.nn.Module or list of torch.nn.Module, optional): The
                        L modules whose outputs are the hidden states
                        :math:`h^l` ``[batch, pos, d]`` (or a tuple starting
                        with them), e.g. each block of a transformer.
                        Default: None (the shortcut: ``forward_func`` is a
                        Hugging Face model and ``layers`` picks its states)
            attribute_to_layer_input (bool, optional): With ``layer``: read
                        each module's first input instead of its output.
                        Default: False
            layers (str, optional): The shortcut's hidden states:
                        ``"inputs"`` for ``hidden_states[0..L-1]`` (block
                        inputs, the authors' code), ``"outputs"`` for
                        ``hidden_states[1..L]`` (block outputs, the paper's
                        Eq. 10) or ``"attention_inputs"`` for what each
                        block's attention reads (a pre-LN decoder's first
                        norm's output; a post-LN encoder's block input).
                        Default: None (``"attention_inputs"`` on a causal
                        LM, chosen by measurement, docs/generation.rst, and
                        on a vision transformer, pre-LN as well;
                        ``"inputs"`` on a text classifier, the authors' code)
            objective (str, optional): Causal LMs: ``"log_prob"`` to
                        differentiate ``log p(y_t)`` or ``"logit"`` for the
                        logit of ``y_t`` at its predicting position; a
                        classifier's objective is always the class logit.
                        Default: ``"log_prob"``
        """
        if layers is not None and layers not in _LAYERS:
            raise ValueError(f"layers must be one of {_LAYERS}, got {layers!r}")
        if objective not in OBJECTIVES:
            raise ValueError(
                f"objective must be one of {OBJECTIVES}, got {objective!r}"
            )
        self.objective = objective
        self.built_from_modules = self._reads_modules(
            layer, layers, attribute_to_layer_input
        )
        if self.built_from_modules:
            assert layer is not None and not isinstance(layer, str)
            self._from_modules(forward_func, layer, attribute_to_layer_input)
            return
        GradientAttribution.__init__(self, forward_func)
        self.layer, self.attribute_to_layer_input = None, False
        adapter = self._use_shortcut(forward_func, images=True)
        pre_ln = adapter.is_causal_lm or adapter.reads_images
        self.layers = layers or ("attention_inputs" if pre_ln else "inputs")
        self._fill_image_modules()

    def _image_modules(self, adapter: ModelAdapter) -> None:
        r"""A vision transformer's states for ``layers``: its blocks' inputs or
        outputs, or what each block's attention reads (its first norm's
        output)."""
        reads = adapter.attention_input_modules()
        if self.layers == "attention_inputs" and reads is not None:
            self.layer = reads
        else:
            self.layer = adapter.blocks()
            self.attribute_to_layer_input = self.layers != "outputs"

    def _from_modules(
        self,
        forward_func: Callable[..., Any],
        layer: ModuleOrModuleList,
        attribute_to_layer_input: bool,
    ) -> None:
        r"""Builds the method Captum's way (:class:`LayerCAT`)."""
        LayerCAT.__init__(self, forward_func, layer, attribute_to_layer_input)

    def _reads_modules(
        self,
        layer: Optional[ModuleOrModuleList],
        layers: Optional[str],
        attribute_to_layer_input: bool,
    ) -> bool:
        r"""True for the explicit route (``layer`` given), False for the
        shortcut; a clear error for a mix of the two."""
        name = type(self).__name__
        if isinstance(layer, str):
            raise TypeError(
                f"{name}'s layer takes the modules whose outputs are the hidden "
                f"states; to pick a Hugging Face model's states pass "
                f"layers={layer!r} by keyword"
            )
        if layer is None:
            if attribute_to_layer_input:
                raise ValueError(
                    f"{name}'s attribute_to_layer_input applies to the modules "
                    "given as layer; the shortcut picks its states with layers="
                )
            return False
        if layers is not None:
            raise ValueError(
                f"{name} takes either layer (the modules, with forward_func) or "
                "layers (a Hugging Face model's states), not both"
            )
        return True

    @log_usage()
    def attribute(
        self,
        inputs: Union[Tensor, Tuple[Tensor]],
        target: TargetType = None,
        additional_forward_args: Any = None,
        *,
        return_layers: bool = False,
        internal_batch_size: Optional[int] = None,
        attribute_generated: bool = False,
        contrast_target: Optional[Tensor] = None,
        targets_per_backward: Optional[int] = None,
        recompute: Optional[bool] = None,
    ) -> Tensor:
        r"""
        Args:

            inputs (Tensor): ``forward_func``'s first argument (built from
                        modules), or token ids ``[batch, pos]`` (the
                        shortcut), as in
                        :meth:`TokenAttribution.attribute`.
            target (int, list, or Tensor, optional): Class whose logit (before
                        softmax) is differentiated: an int or 0-d tensor for every
                        example, or a list / 1-d tensor with one class per
                        example; a causal LM's continuation ids ``[batch, T]``.
                        Default: None (the predicted class of each example)
            additional_forward_args (Any, optional): ``forward_func``'s
                        arguments after ``inputs``, or the shortcut's masks, as
                        in :meth:`TokenAttribution.attribute`.
                        Default: None
            return_layers (bool, optional): Return the score of every layer,
                        ``[batch, L, pos]``, instead of their sum. Layer ``k``
                        is block ``k + 1`` (its input or output, see
                        ``layers``).
                        Default: False
            internal_batch_size (int, optional): Run the batch in chunks of at
                        most this many examples, one forward and one backward
                        pass per chunk, to bound memory; the scores are those of
                        the whole batch.
                        Default: None (the whole batch at once)
            attribute_generated (bool, optional): Causal LMs: also score the
                        generated tokens before each target.
                        Default: False (prompt positions only)
            contrast_target (Tensor, optional): Causal LMs: foil ids
                        ``[batch, T]``; row ``t`` then explains
                        ``log p(y_t) - log p(y'_t)``.
                        Default: None
            targets_per_backward (int, optional): Causal LMs: target steps
                        whose gradients share one backward pass (batched over
                        the steps, holding that many gradients of every hidden
                        state at once; the scores are the same).
                        Default: None (one step per pass on a CPU, where
                        batching is slower, and on prompts past 4,096
                        tokens; up to 16 on shorter prompts on an
                        accelerator, fewer when they do not fit in memory)
            recompute (bool, optional): Causal LMs: run the forward pass
                        without a graph, keeping each block's input, then
                        recompute one block at a time with gradients from
                        the top down, carrying every target step's gradient
                        (docs/generation.rst, "Per-block recomputation"):
                        memory of one block's graph instead of every
                        block's, the same scores. False keeps the whole
                        graph of one forward pass.
                        Default: None (recompute on a CPU, and on an
                        accelerator where the whole graph would take more
                        than half the free memory; the whole graph where
                        the model's blocks cannot be run one at a time)

        Returns:
            *Tensor* of **attributions**:
            - **attributions** (*Tensor*): ``[batch, pos]`` signed scores (or
                        ``[batch, L, pos]`` with ``return_layers=True``, whose
                        sum over dim 1 is the default output) in float32,
                        exactly zero where ``attention_mask`` is 0. For a
                        causal LM (``target`` the continuation's ids
                        ``[batch, T]``, right-padded with -100):
                        ``[batch, T, P]`` (``[batch, T, P + T]`` with
                        ``attribute_generated``; ``[batch, T, L, width]``
                        with ``return_layers``), zero outside the score mask.

        Examples::

            >>> model = AutoModelForSequenceClassification.from_pretrained(
            ...     name, attn_implementation="eager"
            ... )
            >>> enc = tokenizer(texts, padding=True, return_tensors="pt")
            >>> attcat = AttCAT(model)  # or CAT(model)
            >>> attr = attcat.attribute(
            ...     enc["input_ids"], additional_forward_args=(enc["attention_mask"],)
            ... )
        """
        check_positive_int(targets_per_backward, "targets_per_backward")
        check_recompute(recompute)
        scores = self._attribute(
            inputs,
            target,
            additional_forward_args,
            internal_batch_size=internal_batch_size,
            attribute_generated=attribute_generated,
            contrast_target=contrast_target,
            generation_options={
                "targets_per_backward": targets_per_backward,
                "recompute": recompute,
            },
        )  # [batch, L, pos]; causal LMs: [batch, T, L, width]
        return scores if return_layers else scores.sum(-2)

    def _chunk_scores(
        self, batch: TokenBatch, target: TargetType
    ) -> Tuple[Tensor, Tensor]:
        r"""Weighted gradient x hidden state per layer, ``[batch, L, pos]``
        (float32), and the model's logits ``[batch, C]``."""
        logits, hidden, weights = self._forward_to_hidden(
            partial(run_model, self.adapter, batch),
            partial(self._token_weights, batch.valid),
        )  # [batch, C], L x [batch, pos, d], [batch, L, pos] or None
        return self._class_scores(logits, hidden, weights, target)

    def _generated_scores(
        self,
        forced: TeacherForcedBatch,
        contrast: Optional[Tensor],
        targets_per_backward: Optional[int] = None,
        recompute: Optional[bool] = None,
    ) -> Tensor:
        r"""Causal LMs: weighted gradient x hidden state per target and layer,
        ``[batch, T, L, P + T - 1]``, by per-block recomputation or from one
        forward pass and backward passes through its retained graph
        (``targets_per_backward`` steps each)."""
        recomputed = recomputed_scores(
            self.adapter,
            forced,
            recompute,
            partial(self._recomputed_layer_scores, forced, contrast),
            targets_per_backward,
            type(self).__name__,
        )
        if recomputed is not None:
            return recomputed
        logits, hidden, weights = self._forward_to_hidden(
            partial(
                run_teacher_forced, self.adapter, forced, predicting_logits_only=True
            ),
            partial(self._generated_token_weights, forced),
        )  # [batch, T, vocab], L x [batch, pos, d], [batch, T, L, pos] or None
        with torch.enable_grad():
            explained = self._objective(logits, forced.target, contrast)  # [b, T]
        steps = target_gradients(
            explained, hidden, forced.target_mask, targets_per_backward
        )
        with torch.no_grad():
            rows = [gradients_times_states(hidden, grads) for grads in steps]
        scores = torch.stack(rows, dim=1)  # [batch, T, L, pos]
        return scores if weights is None else scores * weights

    def _recomputed_layer_scores(
        self,
        forced: TeacherForcedBatch,
        contrast: Optional[Tensor],
        walk: BlockRecomputation,
        targets_per_backward: Optional[int],
    ) -> Tensor:
        r"""Causal LMs: :meth:`_generated_scores` by ``walk``, one
        forward pass without a graph and one block recomputed at a time."""
        weights = self._weights_without_graph(forced, walk)  # [b, T, L, pos]
        scores = walk.scores(
            self._sites(),
            partial(self._objective, target=forced.target, contrast=contrast),
            forced.target_mask,
            gradient_times_state,
            targets_per_backward,
        )  # [batch, T, L, pos]
        return scores if weights is None else scores * weights

    def _weights_without_graph(
        self, forced: TeacherForcedBatch, walk: BlockRecomputation
    ) -> Optional[Tensor]:
        r"""Causal LMs: ``walk``'s forward pass; the token weights
        ``[batch, T, L, pos]`` from its attention (None for CAT). What the
        capture holds is freed on return, before the walk."""
        capture = (
            self.adapter.attention_capture(type(self).__name__)
            if self.reads_attention
            else None
        )
        with capture or nullcontext():
            out = walk.forward(
                partial(
                    run_teacher_forced,
                    self.adapter,
                    forced,
                    attentions=capture is not None and capture.output_attentions,
                    predicting_logits_only=True,
                )
            )
        with torch.no_grad():
            return (
                None
                if capture is None
                else self._generated_token_weights(forced, capture.layers(out))
            )

    def _sites(self) -> List[Site]:
        r"""The used hidden states as :class:`BlockRecomputation` sites, in the
        order of :meth:`_used_hidden_states`."""
        if self.layers == "attention_inputs":
            modules = self.adapter.attention_input_modules()
            if modules is not None:
                return list(modules)
        first = 1 if self.layers == "outputs" else 0
        return list(range(first, first + self.adapter.num_layers))

    def _objective(
        self, logits: Tensor, target: Tensor, contrast: Optional[Tensor]
    ) -> Tensor:
        r"""``[batch, T]``: ``log p(y_t)`` or the logit of ``y_t`` (minus the
        foil's) from the predicting positions' logits ``[batch, T, vocab]``."""
        if self.objective == "log_prob":
            return predicted_log_probs(logits, target, contrast)
        chosen = _gather_ids(logits, target)
        if contrast is not None:
            chosen = chosen - _gather_ids(logits, contrast)
        return chosen * (target != IGNORE_INDEX)

    def _forward_to_hidden(
        self,
        run: Callable[..., Any],
        weigh: Callable[[List[AttentionInputs]], Optional[Tensor]],
    ) -> Tuple[Tensor, Tuple[Tensor, ...], Optional[Tensor]]:
        r"""One forward pass ``run(hidden_states=True, attentions=...)`` that
        records the graph to the used hidden states: its logits, those hidden
        states and the token weights ``weigh(layers)`` of the blocks'
        attention (when the method reads it)."""
        capture = (
            self.adapter.attention_capture(type(self).__name__)
            if self.reads_attention
            else None
        )
        with gradients_from(self.adapter.embedding_output_module()):
            with HookSet() as hooks, capture or nullcontext():
                reads = self._attention_reads(hooks)
                out = run(
                    hidden_states=True,
                    attentions=capture is not None and capture.output_attentions,
                )
            hidden = self._used_hidden_states(out.hidden_states, reads)
        with torch.no_grad():
            weights = None if capture is None else weigh(capture.layers(out))
        # Only these outlive the forward pass, not ``out``: eager attention maps
        # are freed with the graph once the caller's backward pass is done.
        return out.logits, hidden, weights

    def _generated_token_weights(
        self, forced: TeacherForcedBatch, layers: List[AttentionInputs]
    ) -> Optional[Tensor]:
        r"""Causal LMs: per-target, per-layer token weights ``[batch, T, L, pos]``
        in float32; CAT has none."""
        return None

    def _attention_reads(self, hooks: HookSet) -> Optional[List[List[Tensor]]]:
        r"""With ``layers="attention_inputs"`` on a pre-LN model: per block, the
        store its first norm's output fills during the forward pass."""
        if self.layers != "attention_inputs":
            return None
        modules = self.adapter.attention_input_modules()
        return None if modules is None else [hooks.capture_output(m) for m in modules]

    def _used_hidden_states(
        self, hidden_states: Tuple[Tensor, ...], reads: Optional[List[List[Tensor]]]
    ) -> Tuple[Tensor, ...]:
        if reads is not None:
            return tuple(
                single_call(store, "CAT", f"block {block}'s attention input")
                for block, store in enumerate(reads, start=1)
            )
        if self.layers == "outputs":
            return tuple(hidden_states[1:])
        # "inputs", and "attention_inputs" where attention reads the block input
        return tuple(hidden_states[:-1])


def _gather_ids(logits: Tensor, ids: Tensor) -> Tensor:
    r"""``logits[b, t, ids[b, t]]`` ``[batch, T]`` in float32 or wider."""
    chosen = logits.gather(-1, ids.clamp(min=0)[..., None]).squeeze(-1)
    return chosen.to(result_dtype(chosen.dtype))
