#!/usr/bin/env python3

from typing import (
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    overload,
    Sequence,
    Tuple,
    Union,
)

import torch
from captum.attr._core.llm_attr import (
    _convert_ids_to_pretty_tokens,
    LLMAttributionResult,
)
from captum.attr._utils.attribution import Attribution
from torch import Tensor

from captum_ext._utils.hooks import eval_semantics
from captum_ext._utils.log import log_usage
from captum_ext._utils.teacher_forcing import teacher_forced_batch, TeacherForcedBatch
from captum_ext._utils.token_batch import check_tokenizer_vocabulary
from captum_ext.adapters import get_adapter
from captum_ext.attr._utils.captum_llm_options import (
    check_attr_target,
    check_baselines,
    check_keywords,
)
from captum_ext.attr._utils.continuations import (
    generate_continuations,
    left_padded,
    prompt_pad_id,
    right_padded,
)
from captum_ext.attr._utils.llm_prompts import (
    check_text,
    is_chat,
    prepare_prompt,
    Prompt,
)
from captum_ext.attr._utils.teacher_forced_attribution import TeacherForcedLogProbs

TargetLike = Union[str, Tensor, Sequence[int], None]
# A batch's targets: one per prompt, each given (a None inside is refused).
TargetBatch = Sequence[Union[str, Tensor, Sequence[int]]]


class LLMTokenAttribution(Attribution):  # type: ignore[misc]  # untyped captum
    r"""
    Explains what a causal language model generates with any captum_ext method,
    in the shape of Captum's ``LLMAttribution(FeatureAblation(model), tokenizer)``:
    the same inputs, targets and result (Captum's own ``LLMAttributionResult``,
    so ``plot_token_attr()`` / ``plot_seq_attr()`` work unchanged)::

        # Captum:     llm_attr = LLMAttribution(FeatureAblation(model), tokenizer)
        llm_attr = LLMTokenAttribution(AttCAT(model), tokenizer)
        result = llm_attr.attribute(TextTokenInput(prompt, tokenizer), target=answer)
        result.plot_token_attr()

    ``token_attr[t, j]`` is the method's score of prompt feature ``j`` for the
    target token ``y_t``, i.e. for :math:`\log p(y_t \mid \text{prompt}, y_{<t})`
    under teacher forcing (every method's row ``t`` equals the method run on
    prompt + :math:`y_{<t}` with the single target :math:`y_t`); ``seq_attr`` is
    its sum over the targets, as Captum's ``LLMGradientAttribution`` computes it
    (for a log-probability target the scores of the sequence
    :math:`\log p(y \mid \text{prompt}) = \sum_t \log p(y_t \mid \cdot)` add up).
    With ``attr_target="prob"`` row ``t`` explains :math:`p(y_t \mid \cdot)`
    and ``seq_attr`` :math:`p(y \mid \text{prompt})`, as in Captum.
    A feature made of several tokens (a ``TextTemplateInput`` segment) gets the
    sum of its tokens' scores.

    The prompt and the continuation run through the method's model in one
    teacher-forced pass: compare with Captum's ``LLMAttribution`` under
    ``forward_in_tokens=False`` (one teacher-forced pass per perturbation, its
    fastest setting) or ``use_cached_outputs=False`` (token by token, the same
    scores); its default ``use_cached_outputs=True`` disagrees with both on
    transformers 5 (and fails on GPT-2 past about 40 prompt tokens).

    Beyond Captum:

    - **Batches**: a list of prompts (and a list of targets, or None) gives a
      list of results, each equal to the prompt explained alone; prompts are
      left-padded and position ids count attended tokens only, so padding
      changes nothing.
    - **String targets without BOS**: a string target is encoded with
      ``add_special_tokens=False`` (as Captum does), so a Llama-style tokenizer
      puts no BOS inside the continuation. Captum's ``TextTokenInput`` prompt
      keeps the BOS the tokenizer adds, where it belongs.
    - **Chats**: a list of ``{"role": ..., "content": ...}`` messages (or a
      string with ``chat=True``, one user message) goes through
      ``tokenizer.apply_chat_template(..., add_generation_prompt=True)``; the
      template's tokens (role markers, BOS, separators) are read by the model
      but treated as special: they get no column, as Captum's ``skip_tokens``.
      The columns are the messages' content tokens, located by rendering the
      template with a marker as each content (never by searching the text); a
      template whose contents cannot be located exactly is refused.
    - **Captum's arguments**: ``num_trials``, ``use_cached_outputs``,
      ``_inspect_forward`` and ``forward_in_tokens`` in Captum's positions,
      each with its meaning here (see ``attribute``), Captum's ``gen_args``
      rule, ``skip_tokens`` and ``attr_target``, so a script written for
      ``LLMAttribution`` runs unchanged; an argument the method cannot honour
      (an input's ``baselines``: the methods perturb nothing; a keyword of
      another method, ``n_samples``) is an error naming it.
    - **Checks before generating**: the tokenizer's size, the prompt ids, the
      positions a generation needs and ``gen_args`` that would return several
      sequences are checked before ``generate()`` runs.
    - **Contrast**: ``contrast_target`` (a foil string or ids of the target's
      length) explains :math:`\log p(y_t) - \log p(y'_t)` (methods that explain
      logits, LogAt, use the logit difference).
    - **Earlier generated tokens**: with ``attribute_generated=True`` the
      columns are the prompt's features followed by the target's tokens
      (``input_tokens`` = prompt features + output tokens), so row ``t`` also
      scores :math:`y_{<t}`; it is zero at :math:`y_t`'s own column and after.
    - ``internal_batch_size`` (prompts per chunk) and any other keyword of the
      method's ``attribute`` are passed on.

    A tokenizer without a pad token works: padding positions are masked, so they
    are filled with the EOS id (0 if there is none either), also for
    ``generate``; the tokenizer is not modified.

    Args:

        method (Attribution): a captum_ext method built on a causal LM
                (``AttCAT(model)``, ``LogAt(model)``, ...), following the contract of
                ``method.attribute(input_ids, target=[batch, T] ids, ...)``;
                its ``.model`` is the model that generates.
        tokenizer (PreTrainedTokenizerBase): the model's Hugging Face
                tokenizer.
        attr_target (str, optional): Captum's ``"log_prob"`` or ``"prob"``,
                for a method whose ``objective`` is ``"log_prob"`` (``CAT``,
                ``AttCAT``: scores linear in the gradient of
                :math:`\log p(y_t)`). ``"prob"`` explains :math:`p(y_t \mid
                \cdot)`: as :math:`\nabla p = p \, \nabla \log p`, row ``t``
                is the ``"log_prob"`` row times :math:`p(y_t \mid
                \text{prompt}, y_{<t})` and ``seq_attr`` explains
                :math:`p(y \mid \text{prompt})`, as in Captum. Refused for
                any other method (it explains another quantity), and with
                ``contrast_target``. Default: None (the method's own
                objective)
    """

    def __init__(
        self, method: Any, tokenizer: Any, attr_target: Optional[str] = None
    ) -> None:
        model = getattr(method, "model", None)
        if model is None:
            raise TypeError(
                "LLMTokenAttribution takes a captum_ext method built on a causal "
                f"LM, e.g. LogAt(model); {type(method).__name__} has no .model"
            )
        adapter = get_adapter(model)
        adapter.require_causal_lm("LLMTokenAttribution")
        check_tokenizer_vocabulary(adapter, tokenizer)
        check_attr_target(method, attr_target)
        self.model: Any = adapter.model  # a GenerationMixin
        self._adapter = adapter
        super().__init__(self.model)
        self.method = method
        self.tokenizer = tokenizer
        self.attr_target = attr_target

    # One result for a prompt (a chat is one prompt), a list for a list of them.
    @overload
    def attribute(
        self,
        inp: Sequence[Mapping[str, Any]],
        target: TargetLike = None,
        num_trials: int = 1,
        gen_args: Optional[Dict[str, Any]] = None,
        use_cached_outputs: bool = True,
        _inspect_forward: Optional[Callable[[str, str, List[float]], None]] = None,
        forward_in_tokens: bool = True,
        *,
        contrast_target: TargetLike = None,
        attribute_generated: bool = False,
        chat: bool = False,
        skip_tokens: Optional[Union[List[int], List[str]]] = None,
        internal_batch_size: Optional[int] = None,
        **kwargs: Any,
    ) -> LLMAttributionResult: ...  # a chat

    @overload
    def attribute(
        self,
        inp: List[Any],
        target: Optional[TargetBatch] = None,
        num_trials: int = 1,
        gen_args: Optional[Dict[str, Any]] = None,
        use_cached_outputs: bool = True,
        _inspect_forward: Optional[Callable[[str, str, List[float]], None]] = None,
        forward_in_tokens: bool = True,
        *,
        contrast_target: Optional[TargetBatch] = None,
        attribute_generated: bool = False,
        chat: bool = False,
        skip_tokens: Optional[Union[List[int], List[str]]] = None,
        internal_batch_size: Optional[int] = None,
        **kwargs: Any,
    ) -> List[LLMAttributionResult]: ...  # a batch

    @overload
    def attribute(
        self,
        inp: Any,
        target: TargetLike = None,
        num_trials: int = 1,
        gen_args: Optional[Dict[str, Any]] = None,
        use_cached_outputs: bool = True,
        _inspect_forward: Optional[Callable[[str, str, List[float]], None]] = None,
        forward_in_tokens: bool = True,
        *,
        contrast_target: TargetLike = None,
        attribute_generated: bool = False,
        chat: bool = False,
        skip_tokens: Optional[Union[List[int], List[str]]] = None,
        internal_batch_size: Optional[int] = None,
        **kwargs: Any,
    ) -> LLMAttributionResult: ...  # a prompt

    @log_usage()
    def attribute(
        self,
        inp: Any,
        target: Union[TargetLike, TargetBatch] = None,
        num_trials: int = 1,
        gen_args: Optional[Dict[str, Any]] = None,
        use_cached_outputs: bool = True,
        _inspect_forward: Optional[Callable[[str, str, List[float]], None]] = None,
        forward_in_tokens: bool = True,
        *,
        contrast_target: Union[TargetLike, TargetBatch] = None,
        attribute_generated: bool = False,
        chat: bool = False,
        skip_tokens: Optional[Union[List[int], List[str]]] = None,
        internal_batch_size: Optional[int] = None,
        **kwargs: Any,
    ) -> Union[LLMAttributionResult, List[LLMAttributionResult]]:
        r"""
        Args:

            inp (TextTokenInput, TextTemplateInput, str or list): the prompt:
                        Captum's ``TextTokenInput`` or ``TextTemplateInput``
                        (without ``baselines``: the methods perturb nothing, so
                        an input with baselines is refused),
                        a string (tokenised as ``TextTokenInput(inp, tokenizer,
                        skip_tokens=skip_tokens)``), or a chat (a list of
                        ``{"role", "content"}`` messages); or a list of those
                        (a batch).
            target (str, Tensor or list of int, optional): the continuation to
                        explain: a string (encoded without special tokens) or
                        token ids ``[T]``; a list of them for a batch. None:
                        the model generates it from each prompt with
                        ``gen_args``. Default: None
            num_trials (int, optional): Captum's number of trials: the result
                        is the mean of ``num_trials`` runs of the method, as
                        Captum averages its trials. Every captum_ext method is
                        a deterministic function of the model and the ids, so
                        the mean equals one run (up to the last bit of float
                        addition); more trials only cost time. Must be a
                        positive int. Default: 1
            gen_args (dict, optional): keywords of ``model.generate`` when
                        ``target`` is None, with Captum's rule: None or empty
                        means Captum's defaults ``{"max_new_tokens": 25,
                        "do_sample": False, "temperature": None, "top_p":
                        None}`` (greedy); a given dict is used as it is (what
                        it leaves out comes from the model's generation
                        config, as in Captum). A
                        generated continuation ends at its first EOS
                        (included). ``num_return_sequences`` > 1 (several
                        sequences per prompt) is refused before generating;
                        ``return_dict_in_generate=True`` is read as its
                        ``sequences``. Default: None
            use_cached_outputs (bool, optional): Captum's switch between cached
                        and uncached token-by-token decoding. Accepted and
                        without effect: the whole continuation is one
                        teacher-forced pass, which is Captum's
                        ``use_cached_outputs=False``. Default: True
            _inspect_forward (callable, optional): Captum's callback
                        ``(prompt, response, probs)``, called after each forward
                        pass of a perturbed prompt. The methods here perturb
                        nothing, so it is called once per prompt with the
                        decoded prompt ids, the decoded continuation and
                        ``[p(y), p(y_1), ..., p(y_T)]`` of the unperturbed
                        teacher-forced pass (Captum's layout). Default: None
            forward_in_tokens (bool, optional): Captum's switch between
                        token-by-token and one-pass forwards. Accepted and
                        without effect: the continuation is always one
                        teacher-forced pass. Default: True
            contrast_target (str, Tensor or list of int, optional): a foil of
                        the target's length (a list for a batch); the rows then
                        explain :math:`\log p(y_t) - \log p(y'_t)`. Default: None
            attribute_generated (bool, optional): add the target's tokens as
                        columns after the prompt's. Default: False
            chat (bool, optional): a string prompt is one user message of a
                        chat. Default: False
            skip_tokens (list of int or str, optional): tokens of a string
                        prompt or a chat that get no column (Captum's
                        ``skip_tokens``). For a ``TextTokenInput`` or
                        ``TextTemplateInput`` it is ignored, as Captum's
                        ``LLMAttribution`` ignores it (the input's own
                        arguments decide its columns), with a warning when it
                        names a token that keeps a column. Default: None
            internal_batch_size (int, optional): prompts per chunk of the
                        method. Default: None (the whole batch)
            **kwargs (Any, optional): further keywords of the method's
                        ``attribute``; a keyword it does not take (e.g. Captum's
                        ``n_samples``, ``n_steps``, ``show_progress``) is a
                        ``TypeError`` naming the method and the Captum methods
                        that take it.

        Returns:
            LLMAttributionResult or list: Captum's result (a list for a list of
            prompts): ``token_attr`` ``[n_targets, n_features]``, ``seq_attr``
            ``[n_features]`` (its sum over the targets), ``input_tokens`` (the
            features: tokens, or a template's values) and ``output_tokens``, as
            Captum fills them.
        """
        _check_captum_options(
            num_trials, use_cached_outputs, _inspect_forward, forward_in_tokens
        )
        check_keywords(self.method, kwargs)
        if self.attr_target == "prob" and contrast_target is not None:
            raise ValueError(
                "attr_target='prob' with contrast_target: p(y) - p(y') is not a "
                "scaling of the rows; use attr_target='log_prob' (or None)"
            )
        batched = isinstance(inp, list) and not is_chat(inp)
        inputs = inp if batched else [inp]
        if batched and not inputs:
            raise ValueError("empty batch: inp is an empty list")
        for one in inputs:
            check_baselines(one, self.method)
        prompts = [prepare_prompt(i, self.tokenizer, chat, skip_tokens) for i in inputs]
        ids, mask = left_padded(
            [prompt.ids for prompt in prompts],
            prompt_pad_id(self.tokenizer),
            self._adapter.input_device(),
        )
        if target is None:
            if contrast_target is not None:
                raise ValueError("contrast_target needs an explicit target")
            targets = generate_continuations(
                self.model, self.tokenizer, ids, mask, gen_args
            )
        else:
            if gen_args is not None:
                raise ValueError("gen_args is only used when target is None")
            targets = self._encode_all(target, batched, len(prompts), "target")
        contrasts = (
            None
            if contrast_target is None
            else self._encode_all(
                contrast_target, batched, len(prompts), "contrast_target"
            )
        )
        _check_contrast_lengths(targets, contrasts)
        target_ids = right_padded(targets, ids.device)  # [batch, T]
        trials = [
            self.method.attribute(
                ids,
                target=target_ids,
                additional_forward_args=(mask,),
                attribute_generated=attribute_generated,
                contrast_target=(
                    None if contrasts is None else right_padded(contrasts, ids.device)
                ),
                internal_batch_size=internal_batch_size,
                **kwargs,
            )
            for _ in range(num_trials)
        ]
        scores = torch.stack(trials).mean(0)  # [batch, T, P] or [batch, T, P + T]
        probs = (
            self._log_probs(ids, mask, target_ids)[0].exp()  # [batch, T]
            if self.attr_target == "prob"
            else None
        )
        if _inspect_forward is not None:
            self._inspect(_inspect_forward, ids, mask, target_ids)
        results = [
            self._result(
                prompt,
                scores[row],
                targets[row],
                ids.shape[1],
                attribute_generated,
                None if probs is None else probs[row],
            )
            for row, prompt in enumerate(prompts)
        ]
        return results if batched else results[0]

    def attribute_future(self) -> Callable[[], LLMAttributionResult]:
        r"""
        Not implemented, as for Captum's ``LLMAttribution``: call ``attribute``.
        """
        raise NotImplementedError(
            "attribute_future is not implemented for LLMTokenAttribution; call "
            "attribute()"
        )

    def _log_probs(
        self, ids: Tensor, mask: Tensor, target: Tensor
    ) -> Tuple[Tensor, TeacherForcedBatch]:
        r"""``[batch, T]`` :math:`\log p(y_t \mid \text{prompt}, y_{<t})` of the
        unperturbed teacher-forced pass, and that pass's batch."""
        vocab_size = self._adapter.word_embeddings().num_embeddings
        forced = teacher_forced_batch(
            ids, mask, target, prompt_pad_id(self.tokenizer), vocab_size
        )
        with eval_semantics(self.model), torch.no_grad():
            log_probs = TeacherForcedLogProbs(self.model)(
                *forced.model_inputs(), forced.target
            )  # [batch, T]
        return log_probs, forced

    def _inspect(
        self,
        callback: Callable[[str, str, List[float]], None],
        ids: Tensor,
        mask: Tensor,
        target: Tensor,
    ) -> None:
        r"""Captum's ``_inspect_forward`` on the unperturbed teacher-forced pass:
        ``(prompt, response, [p(y), p(y_1), ..., p(y_T)])`` per prompt."""
        log_probs, forced = self._log_probs(ids, mask, target)
        for row in range(len(ids)):
            steps = log_probs[row][forced.target_mask[row]]  # [T_b]
            probs = torch.cat([steps.sum()[None], steps]).exp()
            callback(
                self.tokenizer.decode(ids[row][mask[row].bool()]),
                self.tokenizer.decode(forced.target[row][forced.target_mask[row]]),
                probs.tolist(),
            )

    def _encode_all(
        self, value: Any, batched: bool, batch_size: int, name: str
    ) -> List[Tensor]:
        if not batched:
            return [self._encode(value, name)]
        if not isinstance(value, list) or len(value) != batch_size:
            raise ValueError(
                f"for a list of {batch_size} prompts, {name} must be a list of "
                f"{batch_size} targets (strings or token ids) or None"
            )
        return [self._encode(v, name) for v in value]

    def _encode(self, value: Any, name: str) -> Tensor:
        device = self._adapter.input_device()
        if isinstance(value, (list, tuple)) and not value:
            raise ValueError(f"empty {name}: it holds no token id")
        if isinstance(value, str):
            check_text(value, name)
            # No BOS (or other special token) inside a continuation.
            ids = torch.tensor(
                self.tokenizer(value, add_special_tokens=False)["input_ids"]
            )
        elif isinstance(value, (Tensor, list, tuple)):
            ids = torch.as_tensor(value)
            if ids.dim() == 2 and ids.shape[0] == 1:
                ids = ids[0]
            if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
                raise ValueError(
                    f"{name} as token ids must be integers of shape [T], got "
                    f"{ids.dtype} {tuple(ids.shape)}"
                )
        else:
            raise TypeError(
                f"{name} must be a string or token ids, got {type(value).__name__}"
            )
        if ids.numel() == 0:
            raise ValueError(f"empty {name}: it encodes to no token")
        return ids.long().to(device)

    def _result(
        self,
        prompt: Prompt,
        scores: Tensor,
        target: Tensor,
        prompt_width: int,
        attribute_generated: bool,
        probs: Optional[Tensor],
    ) -> LLMAttributionResult:
        r"""Captum's result of one prompt from its log-probability ``scores``
        ``[T, width]``; with ``probs`` ``[T]`` (``attr_target="prob"``) row
        ``t`` explains :math:`p(y_t)` and ``seq_attr``
        :math:`p(y) = \prod_t p(y_t)`, by :math:`\nabla p = p \, \nabla \log p`."""
        n_targets, n_prompt = len(target), len(prompt.ids)
        rows = scores[:n_targets].detach()  # [T_b, P] or [T_b, P + T]
        columns = prompt.feature_scores(rows[:, prompt_width - n_prompt : prompt_width])
        output_tokens = _convert_ids_to_pretty_tokens(target.cpu(), self.tokenizer)
        input_tokens = list(prompt.names)
        if attribute_generated:
            generated = rows[:, prompt_width : prompt_width + n_targets]
            columns = torch.cat([columns, generated], 1)
            input_tokens += output_tokens
        seq_attr = columns.sum(0)  # explains log p(y) = sum_t log p(y_t)
        if probs is not None:
            probs = probs[:n_targets]
            seq_attr, columns = seq_attr * probs.prod(), columns * probs[:, None]
        return LLMAttributionResult(
            seq_attr=seq_attr,
            token_attr=columns,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            inp=prompt.inp,
        )


def _check_contrast_lengths(
    targets: List[Tensor], contrasts: Optional[List[Tensor]]
) -> None:
    if contrasts is None:
        return
    for row, (target, foil) in enumerate(zip(targets, contrasts)):
        if len(target) != len(foil):
            raise ValueError(
                f"contrast_target of prompt {row} has {len(foil)} tokens but its "
                f"target has {len(target)}; a foil gives one token per target step"
            )


def _check_captum_options(
    num_trials: Any, use_cached_outputs: Any, inspect: Any, forward_in_tokens: Any
) -> None:
    r"""Captum's own ``LLMAttribution.attribute`` options, checked as Captum's
    types (see :meth:`LLMTokenAttribution.attribute` for what each means here)."""
    if isinstance(num_trials, dict):
        raise TypeError(
            "num_trials must be a positive int, got a dict: the third argument is "
            "num_trials, as in Captum's LLMAttribution (LLMGradientAttribution "
            "takes gen_args there); pass gen_args=... by name"
        )
    if not isinstance(num_trials, int) or isinstance(num_trials, bool):
        raise TypeError(f"num_trials must be a positive int, got {num_trials!r}")
    if num_trials < 1:
        raise ValueError(f"num_trials must be a positive int, got {num_trials}")
    for name, value in (
        ("use_cached_outputs", use_cached_outputs),
        ("forward_in_tokens", forward_in_tokens),
    ):
        if not isinstance(value, bool):
            raise TypeError(
                f"{name} must be a bool (Captum's switch; it has no effect here: "
                f"the continuation is one teacher-forced pass), got {value!r}"
            )
    if inspect is not None and not callable(inspect):
        raise TypeError(
            "_inspect_forward must be None or a callable (prompt, response, probs), "
            f"got {type(inspect).__name__}"
        )
