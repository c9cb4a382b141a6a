#!/usr/bin/env python3
r"""Every option of ``captum-ext``, declared once: a field of a frozen record
whose metadata builds its argparse argument
(:func:`~captum_ext.cli.parser.build_parser`) and whose value the command
reads, by the same name from the flag (``--batch-size``) to the record
(``batch_size``) to the job's own record
(:class:`~captum_ext.evaluation.options.BenchmarkOptions`), with one default.

The records of option groups (the model, the data, a job over a dataset) are
combined by inheritance into one record per command, so a helper takes the
group it reads (``ModelOptions``) and a command passes its whole record. Flags
whose meaning differs between commands (``--target``) are declared by each
command's record; a flag shared with a help or requirement of its own
(``--model`` of ``explain-generation``) overrides only that in
:mod:`~captum_ext.cli.parser`. This module imports no torch.
"""

from dataclasses import dataclass, field, Field, fields
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

from captum_ext.evaluation.names import (
    GENERATION_METRIC_NAMES,
    METHOD_NAMES,
    METRIC_NAMES,
    SOURCE_NAMES,
)
from captum_ext.evaluation.options import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_SHARD_SIZE,
    JobOptions,
)

__all__ = [
    "AttributeCommand",
    "BENCHMARK_TASKS",
    "BenchmarkCommand",
    "DEFAULT_TASKS",
    "DataOptions",
    "DebugOption",
    "ExplainCommand",
    "ExplainGenerationCommand",
    "flag",
    "JobCommand",
    "ModelOptions",
    "names",
    "option",
    "option_fields",
]

TASKS = ("sentiment", "source")
# The benchmark's built-in tasks: the two classifiers, the digits ViT and the
# default generators' key-value recall, long recall and flag sum
# (evaluation/tasks.py BUILT_IN_TASKS).
BENCHMARK_TASKS = TASKS + ("digits", "recall", "recall_long", "flags")
# What a first run does without flags: one classifier task, the digits ViT
# and the two generation tasks whose models train in minutes, at DEFAULT_N
# examples, so that with the one-time model preparation it fits 15 minutes on
# 2 CPU cores (evaluation/tasks.py adds up the measured pieces); --full runs every
# task at FULL_N.
DEFAULT_TASKS = ("sentiment", "digits", "recall", "flags")
DEFAULT_N = 16
FULL_N = 64
DTYPE_NAMES = ("float32", "bfloat16", "float16")


def names(known: Sequence[str]) -> str:
    r"""Names for a help text, quoted where they hold a space."""
    return ", ".join(f"'{n}'" if " " in n else n for n in known)


def option(
    default: Any = None,
    *,
    help: str,
    positive: bool = False,
    positional: bool = False,
    factory: Optional[Callable[[], Any]] = None,
    **argument: Any,
) -> Any:
    r"""A record field that is also a command-line argument.

    Args:
        default (Any, optional): the field's and the flag's default.
        help (str): the argument's help text.
        positive (bool, optional): the value, when given, must be >= 1
            (:func:`~captum_ext.cli.checks.check_positive_options`).
        positional (bool, optional): a positional argument, not a flag.
        factory (Callable, optional): builds a mutable default instead of
            ``default``.
        **argument (Any): further keywords of ``add_argument`` (``type``,
            ``choices``, ``nargs``, ``action``, ``flag`` for a flag not named
            after the field).
    """
    metadata = {
        "help": help,
        "positive": positive,
        "positional": positional,
        "factory": factory,
        "argument": argument,
    }
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def flag(declaration: "Field[Any]") -> str:
    r"""The command-line flag of a record field: ``--batch-size``."""
    named = declaration.metadata["argument"].get("flag")
    return named or "--" + declaration.name.replace("_", "-")


def option_fields(record: Any) -> List["Field[Any]"]:
    r"""The fields of a record class or instance that are options."""
    return [f for f in fields(record) if "help" in f.metadata]


# ------------------------------------------------------------------ groups
@dataclass(frozen=True)
class ModelOptions:
    r"""Where the model comes from and where it runs."""

    model: Optional[str] = option(
        help="sequence classifier (or, with --prompt-column, causal LM): a "
        "directory written by save_pretrained or a Hub model id (org/name; "
        "cached under HF_HOME)"
    )
    revision: Optional[str] = option(
        help="branch, tag or commit of a Hub --model; default: main"
    )
    trust_remote_code: bool = option(
        False,
        action="store_true",
        help="run the model repository's own code (only for repositories you "
        "trust); default: off",
    )
    tokenizer: Optional[str] = option(
        help="tokenizer directory or Hub id; default: --model"
    )
    device: str = option("cpu", help="torch device; default: cpu")
    dtype: str = option("float32", choices=DTYPE_NAMES, help="default: float32")


@dataclass(frozen=True)
class MethodsOption:
    methods: Optional[Sequence[str]] = option(
        nargs="+",
        metavar="NAME",
        help=f"method names (quote names with spaces): {names(METHOD_NAMES)}",
    )


@dataclass(frozen=True)
class MaxLengthOption:
    max_length: Optional[int] = option(
        type=int,
        positive=True,
        help="tokens per text; longer texts are cut, with a notice "
        "(default: 64 for the built-in models, else what the model allows)",
    )


@dataclass(frozen=True)
class NewTokensOption:
    max_new_tokens: Optional[int] = option(
        type=int,
        positive=True,
        help="tokens the causal LM generates without --target-column "
        f"(ending at its first EOS); default: {DEFAULT_MAX_NEW_TOKENS}",
    )


@dataclass(frozen=True)
class SourcesOption:
    sources: str = option(
        "tokens",
        choices=SOURCE_NAMES,
        help="score the prompt's tokens, or its sentences or lines (each the "
        "sum of its tokens' scores; docs/generation.rst); default: tokens",
    )


@dataclass(frozen=True)
class DebugOption:
    r"""Every command's: how an error is reported
    (:func:`~captum_ext.cli.entry.main`), not what the command does."""

    debug: bool = option(
        False, action="store_true", help="show the traceback of an error"
    )


@dataclass(frozen=True)
class DataOptions:
    r"""The rows of ``--data`` and their columns (``load_data``'s arguments)."""

    data: Optional[str] = option(
        help="CSV, TSV, JSON Lines, Parquet file, save_to_disk directory or Hub "
        "dataset id"
    )
    config_name: Optional[str] = option(
        help="configuration of a Hub dataset (e.g. glue's sst2)"
    )
    text_column: str = option("text", help="default: text")
    text_pair_column: Optional[str] = option(help="second segment (NLI, pairs)")
    label_column: Optional[str] = option(
        help="gold labels: class indices or the model's names"
    )
    split: Optional[str] = option(
        help="split of a save_to_disk directory or Hub dataset"
    )
    limit: Optional[int] = option(
        type=int, positive=True, help="use at most this many rows"
    )
    seed: Optional[int] = option(type=int, help="shuffle rows with this seed")
    prompt_column: Optional[str] = option(
        help="explain a causal LM (--model): the column of prompts"
    )
    target_column: Optional[str] = option(
        help="with --prompt-column: the continuations to explain; default: "
        "the model generates them greedily"
    )


@dataclass(frozen=True)
class JobCommand(
    MaxLengthOption,
    MethodsOption,
    NewTokensOption,
    DataOptions,
    ModelOptions,
):
    r"""What ``benchmark`` and ``attribute`` share: a job over a dataset, with
    the names of :class:`~captum_ext.evaluation.options.JobOptions`."""

    metrics: Optional[Sequence[str]] = option(
        nargs="+",
        metavar="NAME",
        help=f"metric names: {names(METRIC_NAMES)}; with --prompt-column or "
        f"for the tasks recall, recall_long and flags: "
        f"{names(GENERATION_METRIC_NAMES)}",
    )
    batch_size: int = option(
        JobOptions.batch_size,
        type=int,
        positive=True,
        help=f"default: {JobOptions.batch_size}",
    )
    progress: bool = option(
        JobOptions.progress,
        flag="--no-progress",
        action="store_false",
        help="no progress on stderr",
    )


# ---------------------------------------------------------------- commands
@dataclass(frozen=True)
class ExplainCommand(MaxLengthOption, MethodsOption, ModelOptions):
    r"""``captum-ext explain``."""

    text: str = option("", positional=True, help="the text to classify and explain")
    text_pair: Optional[str] = option(help="second segment of a text pair")
    task: str = option(
        "sentiment",
        choices=TASKS,
        help="built-in model to use (ignored with --model); default: sentiment",
    )
    target: Optional[int] = option(
        type=int, help="class index to explain; default: the prediction"
    )
    html: Optional[Path] = option(type=Path, help="also write an HTML page here")


@dataclass(frozen=True)
class ExplainGenerationCommand(
    SourcesOption, MethodsOption, NewTokensOption, ModelOptions
):
    r"""``captum-ext explain-generation``."""

    prompt: str = option("", positional=True, help="the prompt to continue and explain")
    target: Optional[str] = option(help="the continuation to explain (text)")
    chat: bool = option(
        False,
        action="store_true",
        help="the prompt is a user message of the tokenizer's chat template",
    )
    html: Optional[Path] = option(
        type=Path, help="also write target x prompt heatmaps here"
    )


@dataclass(frozen=True)
class BenchmarkCommand(JobCommand):
    r"""``captum-ext benchmark``."""

    n: Optional[int] = option(
        type=int,
        positive=True,
        help=f"held-out examples per built-in task (same as --limit, which "
        f"also works under torchrun); default: {DEFAULT_N}, with --full "
        f"{FULL_N}",
    )
    tasks: Optional[Sequence[str]] = option(
        nargs="+",
        choices=BENCHMARK_TASKS,
        help="built-in tasks: the sentiment and source classifiers, digits (a "
        "vision transformer on 8 x 8 handwritten digits), and recall, "
        "recall_long (over 1,024 prompt tokens, 16 prompts at most) and flags "
        "(an answer decided by two tokens it does not copy): what the default "
        "generators generate, scored against planted evidence; default: "
        f"{' '.join(DEFAULT_TASKS)}, with --full all",
    )
    full: bool = option(
        False,
        action="store_true",
        help=f"the full run: every built-in task at --n {FULL_N}",
    )
    out: Path = option(
        Path("benchmark_results"),
        type=Path,
        help="output directory; default: ./benchmark_results",
    )

    def built_in_tasks(self) -> List[str]:
        r"""The built-in tasks to run: ``--tasks``, else the default or, with
        ``--full``, every one."""
        return list(self.tasks or (BENCHMARK_TASKS if self.full else DEFAULT_TASKS))

    def examples(self) -> int:
        r"""Examples per built-in task: ``--limit``, ``--n``, else the
        default of the run (``--full``'s or the first run's)."""
        return self.limit or self.n or (FULL_N if self.full else DEFAULT_N)


@dataclass(frozen=True)
class AttributeCommand(SourcesOption, JobCommand):
    r"""``captum-ext attribute``."""

    # Required: the parser never leaves the record's default in place.
    out: Path = option(Path(), type=Path, required=True, help="output directory")
    shard_size: int = option(
        DEFAULT_SHARD_SIZE,
        type=int,
        positive=True,
        help=f"rows per Parquet shard (the unit of resume); default: "
        f"{DEFAULT_SHARD_SIZE}",
    )
    target: str = option(
        "predicted",
        choices=("predicted", "label"),
        help="class to explain: the prediction or the gold label (needs "
        "--label-column); default: predicted",
    )
