#!/usr/bin/env python3
r"""What the command line checks before any work (and before torch is
imported): arguments, flags that go together, outputs it can write and a
local ``--model`` that exists. Each check takes the option record it reads."""

import os
from pathlib import Path
from typing import Any, Sequence

from captum_ext.cli.options import (
    BenchmarkCommand,
    flag,
    JobCommand,
    ModelOptions,
    option_fields,
)
from captum_ext.evaluation.names import (
    check_names,
    GENERATION_METHOD_CHOICES,
    GENERATION_METRIC_NAMES,
    METHOD_CHOICES,
    METRIC_NAMES,
)

__all__ = [
    "check_benchmark_names",
    "check_model",
    "check_model_flags",
    "check_positive_options",
    "check_prompt_flags",
    "check_utf8",
    "check_writable_dir",
    "check_writable_file",
]

# Every metric name --metrics takes: the classifiers' and generated text's.
ALL_METRIC_NAMES = tuple(dict.fromkeys(METRIC_NAMES + GENERATION_METRIC_NAMES))


def check_utf8(argv: Sequence[str]) -> None:
    for value in argv:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "replace").decode("utf-8")
            raise ValueError(f"argument {shown!r} is not valid UTF-8") from None


def check_writable_dir(directory: Path) -> None:
    r"""Writes a probe file in ``directory`` or, when it does not exist yet, in
    its nearest existing parent, before any work. Creates nothing: the job
    creates ``directory`` when it has something to write, so a run that fails
    leaves no empty directory behind."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(20, "Not a directory")
        probe = existing / f".captum-ext-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ValueError(
            f"cannot write to {str(directory)!r}: {error.strerror}"
        ) from None


def check_writable_file(path: Path) -> None:
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a directory, not a file")
    check_writable_dir(path.parent)


def check_model(options: ModelOptions) -> None:
    r"""A missing or foreign local ``--model`` fails here, before torch is
    imported (a Hub id is resolved when the model is loaded)."""
    if options.model is not None:
        from captum_ext.evaluation.hub import is_hub_id
        from captum_ext.evaluation.model_files import read_model_config

        if not is_hub_id(str(options.model)):
            read_model_config(Path(options.model))


def check_positive_options(options: Any) -> None:
    r"""Every option declared ``positive`` is >= 1 where given."""
    for declaration in option_fields(options):
        value = getattr(options, declaration.name)
        if declaration.metadata["positive"] and value is not None and value < 1:
            raise ValueError(f"{flag(declaration)} must be >= 1, got {value}")


def check_model_flags(options: ModelOptions) -> None:
    given = [name for name in ("revision", "tokenizer") if getattr(options, name)]
    if options.model is None and (given or options.trust_remote_code):
        flags = [f"--{name}" for name in given] or ["--trust-remote-code"]
        raise ValueError(f"{flags[0]} applies to --model, which is not given")


def check_benchmark_names(options: BenchmarkCommand) -> None:
    r"""``--methods`` and ``--metrics`` among those of the job: a causal LM's
    (``--prompt-column``), a classifier's (``--model``), or the built-in tasks'
    (each runs the chosen ones it knows)."""
    if options.prompt_column is not None:
        check_names(
            options.methods, GENERATION_METHOD_CHOICES, "method for generated text"
        )
        check_names(
            options.metrics, GENERATION_METRIC_NAMES, "metric for generated text"
        )
        return
    check_names(options.methods, METHOD_CHOICES, "method")
    built_in = options.model is None
    known = ALL_METRIC_NAMES if built_in else METRIC_NAMES
    check_names(options.metrics, known, "metric")


def check_prompt_flags(
    options: JobCommand, sources: str = "tokens", target: str = "predicted"
) -> None:
    r"""The flags of a causal LM's prompts (``attribute`` and ``benchmark``) go
    together, with ``--model``, and not with a classifier's (``sources`` and
    ``target``: ``attribute``'s)."""
    if options.prompt_column is None:
        if sources != "tokens":
            raise ValueError(
                "--sources applies to a causal LM's prompts: give --prompt-column "
                "too"
            )
        for name in ("target_column", "max_new_tokens"):
            if getattr(options, name) is not None:
                raise ValueError(
                    f"--{name.replace('_', '-')} applies to a causal LM's "
                    "prompts: give --prompt-column too"
                )
        return
    if options.model is None:
        raise ValueError("--prompt-column applies to your causal LM: give --model")
    for name in ("text_pair_column", "label_column"):
        if getattr(options, name):
            raise ValueError(
                f"--{name.replace('_', '-')} applies to classifiers, not to a "
                "causal LM's prompts (--prompt-column)"
            )
    if target != "predicted":
        raise ValueError("--target applies to classifiers, not to --prompt-column")
    if options.target_column is not None and options.max_new_tokens is not None:
        raise ValueError(
            "--max-new-tokens applies when the model generates the continuations; "
            "--target-column gives them"
        )
