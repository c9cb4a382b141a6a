#!/usr/bin/env python3
r"""The four commands: each takes its option record
(:mod:`~captum_ext.cli.options`), checks it, loads what it needs and hands
plain arguments or the job's own options record to the evaluation layer."""

import os
import sys
import time
from contextlib import nullcontext
from dataclasses import fields
from pathlib import Path
from typing import Any, ContextManager, Optional, Tuple, Type, TypeVar

from captum_ext._utils.progress import duration
from captum_ext.cli.checks import (
    check_benchmark_names,
    check_model,
    check_model_flags,
    check_positive_options,
    check_prompt_flags,
    check_writable_dir,
    check_writable_file,
)
from captum_ext.cli.options import (
    AttributeCommand,
    BenchmarkCommand,
    DataOptions,
    ExplainCommand,
    ExplainGenerationCommand,
    ModelOptions,
)
from captum_ext.evaluation.names import (
    check_names,
    GENERATION_METHOD_NAMES,
    METHOD_NAMES,
    METRIC_NAMES,
)

__all__ = ["attribute", "benchmark", "explain", "explain_generation"]

# attribute --prompt-column without --methods: the fast and the gradient pair.
GENERATION_DEFAULT_METHODS = ("LogAt", "AttCAT")

Record = TypeVar("Record")


def _main_rank() -> bool:
    return os.environ.get("RANK", "0") == "0"


def job_options(record: Type[Record], options: Any, **given: Any) -> Record:
    r"""A job's options record (``BenchmarkOptions``) from the command's: each
    field the command declares under the same name, and ``given``."""
    declared = {f.name for f in fields(options)}
    wanted = [f.name for f in fields(record)]  # type: ignore[arg-type]
    values = {name: getattr(options, name) for name in wanted if name in declared}
    return record(**{**values, **given})


# ------------------------------------------------------------------ loading
def _given(value: Optional[str], flag: str) -> str:
    r"""A flag the command checked is given (for the type checker: the record
    declares it optional)."""
    if value is None:
        raise ValueError(f"give {flag}")
    return value


def _user_model(
    options: ModelOptions, max_length: Optional[int] = None, causal_lm: bool = False
) -> Tuple[Any, Any]:
    r"""``--model`` and its tokenizer: a sequence classifier, or with
    ``causal_lm`` a causal language model."""
    from captum_ext.evaluation.user_models import load_causal_lm, load_classifier

    load = load_causal_lm if causal_lm else load_classifier
    return load(
        _given(options.model, "--model"),
        tokenizer=options.tokenizer,
        device=options.device,
        dtype=options.dtype,
        max_length=max_length,
        revision=options.revision,
        trust_remote_code=options.trust_remote_code,
    )


def _user_file(options: DataOptions, **columns: Any) -> Any:
    r"""``--data`` with the rows every command selects the same way
    (``--split``, ``--config-name``, ``--limit``, ``--seed``) and the
    command's ``columns`` keywords of ``load_data``."""
    from captum_ext.evaluation.user_data import load_data

    return load_data(
        _given(options.data, "--data FILE"),
        split=options.split,
        config_name=options.config_name,
        limit=options.limit,
        seed=options.seed,
        **columns,
    )


def _user_prompts(options: DataOptions) -> Any:
    return _user_file(
        options,
        text_column=options.prompt_column,
        continuation_column=options.target_column,
    )


def _user_data(options: DataOptions, model: Any) -> Any:
    config = model.config
    return _user_file(
        options,
        text_column=options.text_column,
        text_pair_column=options.text_pair_column,
        label_column=options.label_column,
        label2id=getattr(config, "label2id", None),
        num_labels=getattr(config, "num_labels", None),
    )


def _write_page(path: Path, title: str, body: str) -> None:
    r"""``explain --html`` and ``explain-generation --html``: the page written
    to a temporary file, then renamed (a killed run leaves no torn page)."""
    from captum_ext.evaluation._utils.atomic import write_text_atomically
    from captum_ext.visualization import html_page

    page = html_page(title, body)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, lambda handle: handle.write(page))
    print(f"wrote {path}")


# ------------------------------------------------------------------ explain
def _check_explain(options: Any, html: Any) -> None:
    r"""What ``explain`` and ``explain-generation`` check after their names and
    before loading anything: model flags, positive options, a writable
    ``--html`` and a ``--model`` that exists."""
    check_model_flags(options)
    check_positive_options(options)
    if html is not None:
        check_writable_file(html)
    check_model(options)


def explain(options: ExplainCommand) -> int:
    if not options.text.strip():
        raise ValueError("the text is empty: give some words to explain")
    check_names(options.methods, METHOD_NAMES, "method")
    _check_explain(options, options.html)
    from captum_ext.evaluation.explain import explain as explain_text
    from captum_ext.evaluation.user_models import resolve_device
    from captum_ext.visualization import (
        explanation_html,
        explanation_text,
        supports_color,
    )

    resolve_device(options.device)
    decoder_texts, max_length = None, options.max_length
    if options.model is not None:
        model, tokenizer = _user_model(options, max_length)
    else:
        from captum_ext.defaults.models import load_default_model, MAX_LENGTH
        from captum_ext.evaluation.registry import needs_decoders
        from captum_ext.evaluation.tasks import default_decoder_texts

        model, tokenizer = load_default_model(options.task, device=options.device)
        max_length = max_length or MAX_LENGTH
        # No --methods: explain's defaults, the decoded method included.
        if options.methods is None or needs_decoders(options.methods):
            decoder_texts = default_decoder_texts()
    explanation = explain_text(
        model,
        tokenizer,
        options.text,
        methods=options.methods,
        target=options.target,
        max_length=max_length,
        text_pair=options.text_pair,
        decoder_texts=decoder_texts,
    )
    print(explanation_text(explanation, color=supports_color(sys.stdout)))
    if options.html is not None:
        body = explanation_html(explanation, text=options.text)
        _write_page(options.html, "captum_ext explanation", body)
    return 0


def explain_generation(options: ExplainGenerationCommand) -> int:
    if not options.prompt.strip():
        raise ValueError("the prompt is empty: give some words to continue")
    if options.chat and options.sources != "tokens":
        raise ValueError("--sources applies to a plain prompt, not to --chat")
    check_names(options.methods, GENERATION_METHOD_NAMES, "method for generated text")
    _check_explain(options, options.html)
    from captum_ext.evaluation.explain_generation import (
        explain_generation as explain_prompt,
    )
    from captum_ext.evaluation.user_models import resolve_device
    from captum_ext.visualization import generation_html, generation_text

    resolve_device(options.device)
    if options.model is None:
        from captum_ext.defaults.generator import load_default_generator

        model, tokenizer = load_default_generator(device=options.device)
    else:
        model, tokenizer = _user_model(options, causal_lm=True)
    explanation = explain_prompt(
        model,
        tokenizer,
        options.prompt,
        methods=options.methods,
        target=options.target,
        max_new_tokens=options.max_new_tokens,
        chat=options.chat,
        sources=options.sources,
    )
    print(generation_text(explanation))
    if options.html is not None:
        body = generation_html(explanation)
        _write_page(options.html, "captum_ext: explained generation", body)
    return 0


# ---------------------------------------------------------------- benchmark
def _run_benchmark(options: BenchmarkCommand) -> Any:
    from captum_ext.evaluation.options import (
        BenchmarkOptions,
        GenerationBenchmarkOptions,
    )

    if options.model is None:
        from captum_ext.evaluation.tasks import run_default_tasks

        built_in = job_options(BenchmarkOptions, options)
        return run_default_tasks(options.examples(), options.built_in_tasks(), built_in)
    task = Path(options.model).name or "data"
    if options.prompt_column is not None:
        from captum_ext.evaluation.engine.causal_lm import run_generation_benchmark

        model, tokenizer = _user_model(options, options.max_length, causal_lm=True)
        generation = job_options(GenerationBenchmarkOptions, options, task=task)
        return run_generation_benchmark(
            model, tokenizer, _user_prompts(options), generation
        )
    from captum_ext.evaluation.engine import run_benchmark

    model, tokenizer = _user_model(options, options.max_length)
    data = _user_data(options, model)
    own = job_options(BenchmarkOptions, options, task=task)
    return run_benchmark(model, tokenizer, data, own)


def _alongside(options: BenchmarkCommand) -> ContextManager[Any]:
    r"""The default generators trained in a second process while the main one
    prepares the rest: on the built-in tasks, in a single process (under
    torchrun the ranks already use the cores)."""
    if options.model is not None or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return nullcontext()
    from captum_ext.evaluation.tasks import preparing_generators_alongside

    return preparing_generators_alongside(options.built_in_tasks())


def benchmark(options: BenchmarkCommand) -> int:
    check_benchmark_names(options)
    check_model_flags(options)
    check_positive_options(options)
    check_prompt_flags(options)
    if (options.model is None) != (options.data is None):
        raise ValueError(
            "give both --model and --data for your own model and data, "
            "or neither for the built-in tasks"
        )
    if _main_rank():
        check_writable_dir(options.out)
    check_model(options)
    from captum_ext.evaluation.distributed import distributed_context
    from captum_ext.evaluation.user_models import resolve_device

    resolve_device(options.device)
    if options.model is None and _main_rank():
        from captum_ext.evaluation.tasks import first_run_estimate

        estimate = first_run_estimate(options.built_in_tasks(), options.examples())
        print(estimate, file=sys.stderr, flush=True)
    start = time.perf_counter()
    # One process group for all tasks (each benchmark call joins this one).
    with distributed_context(options.device) as ctx, _alongside(options):
        result = _run_benchmark(options)
    if not ctx.is_main:
        return 0
    from captum_ext.evaluation.report import markdown_table, write_report

    paths = write_report(result, options.out)
    print(markdown_table(result))
    print()
    for kind, path in paths.items():
        print(f"{kind:>8}: {path}")
    print(
        f"total {duration(time.perf_counter() - start)} (benchmark "
        f"{duration(result.wall_seconds)}; the rest: preparing and loading models)"
    )
    return 0


# ---------------------------------------------------------------- attribute
def attribute(options: AttributeCommand) -> int:
    check_names(options.methods, METHOD_NAMES, "method")
    check_names(options.metrics, METRIC_NAMES, "metric")
    check_positive_options(options)
    check_prompt_flags(options, options.sources, options.target)
    if options.prompt_column is not None and options.metrics:
        raise ValueError(
            "--metrics applies to classifiers, not to a causal LM's prompts "
            "(--prompt-column); captum-ext benchmark scores those"
        )
    if options.data is None:
        raise ValueError("give --data FILE: the texts to attribute")
    if _main_rank():
        check_writable_dir(options.out)
    check_model(options)
    from captum_ext.evaluation.attribute import attribute_dataset
    from captum_ext.evaluation.explain import default_methods
    from captum_ext.evaluation.user_models import resolve_device

    resolve_device(options.device)
    if options.prompt_column is None:
        model, tokenizer = _user_model(options, options.max_length)
        data = _user_data(options, model)
        methods = options.methods or default_methods(with_decoders=False)
    else:
        model, tokenizer = _user_model(options, options.max_length, causal_lm=True)
        data = _user_prompts(options)
        methods = options.methods or list(GENERATION_DEFAULT_METHODS)
    path = attribute_dataset(
        model,
        tokenizer,
        data,
        methods,
        options.out,
        metrics=options.metrics,
        batch_size=options.batch_size,
        max_length=options.max_length,
        device=options.device,
        progress=options.progress,
        shard_size=options.shard_size,
        target=options.target,
        max_new_tokens=options.max_new_tokens,
        sources=options.sources,
    )
    if _main_rank():  # one line per job, not per rank
        print(f"wrote {path}")
    return 0
