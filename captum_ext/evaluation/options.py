#!/usr/bin/env python3
r"""The options of a job over a dataset, as typed, frozen records: what the
command line parses, what :func:`~captum_ext.evaluation.engine.run_benchmark`
takes and what the result's ``config`` records. Each option is followed by its
name from ``captum-ext`` to the forward pass (``--batch-size`` ->
``BenchmarkOptions.batch_size`` -> the batches the engine builds), never through
a string key.

:class:`JobOptions` holds what every job over a dataset shares (the benchmark
and dataset attribution); a job's own record extends it. The command line's
flags take their defaults from these records and from
:data:`DEFAULT_MAX_NEW_TOKENS`, the one home of that default. This module
imports no torch, so the command line's ``--help`` stays fast.
"""

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

__all__ = [
    "BenchmarkOptions",
    "continuation_gen_args",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_SHARD_SIZE",
    "GenerationBenchmarkOptions",
    "JobOptions",
]

# Tokens a causal LM generates per prompt when no continuation is given:
# Captum's LLMAttribution default (``DEFAULT_GEN_ARGS``), written out so that
# this module imports no torch.
DEFAULT_MAX_NEW_TOKENS = 25

# Rows per Parquet shard of a dataset attribution (the unit of resume).
DEFAULT_SHARD_SIZE = 1000


def continuation_gen_args(max_new_tokens: Optional[int]) -> Dict[str, Any]:
    r"""The ``gen_args`` of a greedy continuation of at most ``max_new_tokens``
    tokens (None: :data:`DEFAULT_MAX_NEW_TOKENS`): Captum's defaults, written
    out, since given ``gen_args`` replace them (a model whose generation
    config samples would otherwise sample)."""
    return {
        "max_new_tokens": max_new_tokens or DEFAULT_MAX_NEW_TOKENS,
        "do_sample": False,
        "temperature": None,
        "top_p": None,
    }


def _names(names: Optional[Sequence[str]]) -> Optional[Tuple[str, ...]]:
    return None if names is None else tuple(names)


@dataclass(frozen=True)
class JobOptions:
    r"""What every job over a dataset needs besides the model, its tokenizer and
    the data.

    Args:
        methods (tuple of str, optional): names in the registry's ``METHODS``.
            Default: the job's default set.
        metrics (tuple of str, optional): names in the registry's ``METRICS``.
            Default: the job's default set.
        batch_size (int, optional): examples per forward pass and attribution
            call. Default: 16.
        max_length (int, optional): tokens per example; longer texts are cut.
            Default: what the model and tokenizer allow.
        device (str or torch.device, optional): where the model and inputs go.
            Default: the model's device.
        progress (bool, optional): progress on stderr. Default: True.
        decoder_texts (tuple of str, optional): texts the decoders of methods
            that need them are fitted on. Default: the data's texts.
    """

    methods: Optional[Sequence[str]] = None
    metrics: Optional[Sequence[str]] = None
    batch_size: int = 16
    max_length: Optional[int] = None
    device: Optional[Any] = None
    progress: bool = True
    decoder_texts: Optional[Sequence[str]] = None

    def __post_init__(self) -> None:
        # Sequences given by callers are kept as tuples: the record stays
        # immutable.
        for name in ("methods", "metrics", "decoder_texts"):
            object.__setattr__(self, name, _names(getattr(self, name)))


@dataclass(frozen=True)
class BenchmarkOptions(JobOptions):
    r"""A benchmark run (:func:`~captum_ext.evaluation.engine.run_benchmark`):
    the fields of :class:`JobOptions` and

    Args:
        task (str, optional): the label of the result rows. Default: ``"data"``.
        n_examples (int, optional): first rows kept with every method's scores
            for the report's highlights. Default: 3.
    """

    task: str = "data"
    n_examples: int = 3


@dataclass(frozen=True)
class GenerationBenchmarkOptions(BenchmarkOptions):
    r"""A benchmark run on a causal LM
    (:func:`~captum_ext.evaluation.engine.causal_lm.run_generation_benchmark`):
    the fields of :class:`BenchmarkOptions` (``methods`` from
    ``GENERATION_METHOD_NAMES``, ``metrics`` from ``GENERATION_METRIC_NAMES``;
    ``max_length`` bounds prompt + continuation) and

    Args:
        max_new_tokens (int, optional): tokens generated greedily per prompt
            when the data gives no continuations. Default:
            :data:`DEFAULT_MAX_NEW_TOKENS` (25, Captum's).
    """

    max_new_tokens: Optional[int] = None
