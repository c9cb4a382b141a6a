#!/usr/bin/env python3
r"""What differs between dataset attribution on a classifier and on a causal
LM, decided once per run (:func:`plan_for`): the checks of the arguments, the
manifest's arguments, the Parquet schema and the shard builder."""

from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence

import pyarrow as pa
from torch import nn

from captum_ext.adapters import get_adapter, UnsupportedModelError
from captum_ext.evaluation.attribute.schema import generation_schema, run_schema
from captum_ext.evaluation.attribute.shard_builders import (
    CausalLMShards,
    ClassifierShards,
    ShardBuilder,
)
from captum_ext.evaluation.attribute.sources import prompt_groups
from captum_ext.evaluation.prompt_batches import encode_prompts
from captum_ext.evaluation.registry import METHODS
from captum_ext.evaluation.user_data import LoadedExamples

__all__ = ["Plan", "RunInputs", "is_causal_lm", "plan_for"]

_TARGETS = ("predicted", "label")


def is_causal_lm(model: nn.Module) -> bool:
    r"""The adapter's verdict; a model no adapter knows is run as a classifier
    (Captum's baselines need no adapter)."""
    try:
        return get_adapter(model).is_causal_lm
    except UnsupportedModelError:
        return False


class Plan(NamedTuple):
    r"""What differs between a classifier's run and a causal LM's: the
    manifest's arguments, the schema, and the shard builder (made once the
    model is on the rank's device)."""

    arguments: Dict[str, Any]
    schema: pa.Schema
    builder: Callable[[], ShardBuilder]


class RunInputs(NamedTuple):
    r"""The checked arguments of :func:`attribute_dataset` a plan is made from."""

    model: nn.Module
    tokenizer: Any
    data: LoadedExamples
    method_specs: Sequence[Any]
    metric_specs: Sequence[Any]
    length: int  # tokens per example
    target: str
    max_new_tokens: Optional[int]
    sources: str  # a causal LM's prompt columns: tokens, sentences or lines


def classifier_plan(run: RunInputs) -> Plan:
    _check_target(run.target, run.data)
    given = (run.data.continuations, run.max_new_tokens)
    if given != (None, None) or run.sources != "tokens":
        raise ValueError(
            f"continuations, max_new_tokens and sources are for a causal LM's "
            "prompts; "
            f"{type(run.model).__name__} is not a causal LM (it has no LM head, or "
            "has a classification head)"
        )
    names = [spec.name for spec in run.method_specs]
    type_ids = _gives_type_ids(run.tokenizer, run.data)
    return Plan(
        {
            # No "mode" entry: a classifier run's arguments stay as they were,
            # so output written by an earlier version still resumes.
            "metrics": [spec.name for spec in run.metric_specs],
            "target": run.target,
        },
        run_schema(run.data, names, run.metric_specs, type_ids),
        lambda: ClassifierShards(
            run.model,
            run.tokenizer,
            run.method_specs,
            run.metric_specs,
            run.length,
            run.target,
        ),
    )


def causal_lm_plan(run: RunInputs) -> Plan:
    unsupported = [spec.name for spec in run.method_specs if not spec.causal_lm]
    if unsupported:
        able = [name for name, spec in METHODS.items() if spec.causal_lm]
        raise ValueError(
            f"{', '.join(unsupported)} cannot explain a causal LM's text; "
            f"methods that can: {', '.join(able)}"
        )
    if run.metric_specs:
        raise ValueError(
            "metrics are written for classifiers only; drop --metrics for a "
            "causal LM's prompts"
        )
    if run.target != "predicted" or run.data.labels is not None or run.data.text_pairs:
        raise ValueError(
            "a causal LM's prompts take no label, text pair or target class: "
            "give prompts and, optionally, their continuations"
        )
    names = [spec.name for spec in run.method_specs]
    # Checked now, before any shard is written.
    encoded = encode_prompts(run.tokenizer, run.data, run.length, run.max_new_tokens)
    groups = prompt_groups(run.tokenizer, run.data, encoded.prompts, run.sources)
    arguments = {
        "mode": "causal_lm",
        "continuations": "generated" if encoded.given is None else "given",
        "max_new_tokens": encoded.max_new_tokens,
    }
    if groups is not None:  # token runs keep their arguments, so they resume
        arguments["sources"] = run.sources
    return Plan(
        arguments,
        generation_schema(names, sources=groups is not None),
        lambda: CausalLMShards(
            run.model, run.tokenizer, run.method_specs, run.data, encoded, groups
        ),
    )


def _check_target(target: str, data: LoadedExamples) -> None:
    if target not in _TARGETS:
        raise ValueError(f"target must be one of {_TARGETS}, got {target!r}")
    if target == "label" and data.labels is None:
        raise ValueError(
            f"target='label' explains the gold labels, but {data.source} was "
            "loaded without a label column; pass label_column (--label-column)"
        )


def _gives_type_ids(tokenizer: Any, data: LoadedExamples) -> bool:
    r"""Whether the tokenizer gives segment ids for ``data``'s pairs (BERT
    does; RoBERTa-like tokenizers mark pairs with separators only)."""
    if data.text_pairs is None or not len(data):
        return False
    encoded = tokenizer(data.texts[:1], data.text_pairs[:1], verbose=False)
    return encoded.get("token_type_ids") is not None


def plan_for(run: RunInputs) -> Plan:
    r"""The run's plan; the one place the run branches on the kind of model
    (the adapter's call)."""
    make_plan = causal_lm_plan if is_causal_lm(run.model) else classifier_plan
    return make_plan(run)
