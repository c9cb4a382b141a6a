#!/usr/bin/env python3
r"""The ``captum-ext`` command line: argument parsing only; the work is done by
:func:`captum_ext.evaluation.explain.explain`,
:func:`captum_ext.evaluation.explain_generation.explain_generation`,
:func:`captum_ext.evaluation.benchmark` and
:func:`captum_ext.evaluation.attribute.attribute_dataset`.

``captum-ext explain "text"`` prints the prediction and every method's token
scores; ``captum-ext explain-generation "prompt"`` what a causal LM generates
and every method's target x prompt scores; ``captum-ext benchmark`` scores
methods with metrics on your model and data (``--model DIR --data FILE``, with
``--prompt-column`` for a causal LM) or on the built-in tasks (two classifiers,
one generator), and writes a report; ``captum-ext attribute`` writes a whole
dataset's attributions. Every error ends in one line on stderr and a
non-zero exit (``--debug`` shows the traceback). Heavy imports happen inside
the commands, which keeps ``--help`` fast.
"""

import argparse
import os
import sys
import time
import traceback
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, NoReturn, Optional, Sequence, Tuple

from captum_ext._utils.progress import duration
from captum_ext._utils.threads import configure_threads
from captum_ext.evaluation.names import (
    check_names,
    GENERATION_METHOD_CHOICES,
    GENERATION_METHOD_NAMES,
    GENERATION_METRIC_NAMES,
    METHOD_CHOICES,
    METHOD_NAMES,
    METRIC_NAMES,
    SOURCE_NAMES,
)

__all__ = ["main"]

TASKS = ("sentiment", "source")
# The benchmark's built-in tasks: the two classifiers and the default
# generators' key-value recall, long recall and flag sum (evaluation/tasks.py
# BUILT_IN_TASKS).
BENCHMARK_TASKS = TASKS + ("recall", "recall_long", "flags")
# Every metric name --metrics takes: the classifiers' and generated text's.
ALL_METRIC_NAMES = tuple(dict.fromkeys(METRIC_NAMES + GENERATION_METRIC_NAMES))
# Fits the 15-minute budget on 2 CPU cores with first-time model preparation.
DEFAULT_N = 64
DTYPE_NAMES = ("float32", "bfloat16", "float16")
# attribute --prompt-column without --methods: the fast and the gradient pair.
GENERATION_DEFAULT_METHODS = ("LogAt", "AttCAT")


class _Parser(argparse.ArgumentParser):
    r"""Argument errors in one line (no usage block above them)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"'{n}'" if " " in n else n for n in names)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--methods",
        nargs="+",
        metavar="NAME",
        help=f"method names (quote names with spaces): {_names(METHOD_NAMES)}",
    )
    parser.add_argument("--device", default="cpu", help="torch device; default: cpu")
    parser.add_argument(
        "--dtype", choices=DTYPE_NAMES, default="float32", help="default: float32"
    )
    parser.add_argument(
        "--max-length",
        type=int,
        help="tokens per text; longer texts are cut, with a notice "
        "(default: 64 for the built-in models, else what the model allows)",
    )
    parser.add_argument(
        "--tokenizer", help="tokenizer directory or Hub id; default: --model"
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error"
    )


def _model_options(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument(
        "--model",
        required=required,
        help="sequence classifier (or, with --prompt-column, causal LM): a "
        "directory written by save_pretrained or a Hub model id (org/name; "
        "cached under HF_HOME)",
    )
    parser.add_argument(
        "--revision", help="branch, tag or commit of a Hub --model; default: main"
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the model repository's own code (only for repositories you "
        "trust); default: off",
    )


def _data_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        help="CSV, TSV, JSON Lines, Parquet file, save_to_disk directory or Hub "
        "dataset id",
    )
    parser.add_argument(
        "--config-name", help="configuration of a Hub dataset (e.g. glue's sst2)"
    )
    parser.add_argument("--text-column", default="text", help="default: text")
    parser.add_argument("--text-pair-column", help="second segment (NLI, pairs)")
    parser.add_argument(
        "--label-column", help="gold labels: class indices or the model's names"
    )
    parser.add_argument(
        "--split", help="split of a save_to_disk directory or Hub dataset"
    )
    parser.add_argument("--limit", type=int, help="use at most this many rows")
    parser.add_argument("--seed", type=int, help="shuffle rows with this seed")
    parser.add_argument(
        "--metrics",
        nargs="+",
        metavar="NAME",
        help=f"metric names: {_names(METRIC_NAMES)}; with --prompt-column or "
        f"for the tasks recall, recall_long and flags: "
        f"{_names(GENERATION_METRIC_NAMES)}",
    )
    parser.add_argument("--batch-size", type=int, default=16, help="default: 16")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress on stderr"
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="captum-ext",
        description="Transformer token attributions and faithfulness metrics "
        "for Captum.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    explain = commands.add_parser(
        "explain",
        help="explain one text with every method",
        description=(f"Explain one text. Methods: {_names(METHOD_NAMES)}."),
    )
    explain.add_argument("text", help="the text to classify and explain")
    explain.add_argument("--text-pair", help="second segment of a text pair")
    explain.add_argument(
        "--task",
        choices=TASKS,
        default="sentiment",
        help="built-in model to use (ignored with --model); default: sentiment",
    )
    _model_options(explain, required=False)
    explain.add_argument(
        "--target", type=int, help="class index to explain; default: the prediction"
    )
    explain.add_argument("--html", type=Path, help="also write an HTML page here")
    _common(explain)

    _generation_parser(commands)

    bench = commands.add_parser(
        "benchmark",
        help="score methods with metrics on your model and data, or the "
        "built-in tasks",
    )
    _model_options(bench, required=False)
    _data_options(bench)
    bench.add_argument(
        "--n",
        type=int,
        default=DEFAULT_N,
        help=f"held-out examples per built-in task (same as --limit, which "
        f"also works under torchrun); default: {DEFAULT_N}",
    )
    bench.add_argument(
        "--tasks",
        nargs="+",
        choices=BENCHMARK_TASKS,
        default=list(BENCHMARK_TASKS),
        help="built-in tasks: the sentiment and source classifiers, and recall, "
        "recall_long (over 1,024 prompt tokens, 16 prompts at most) and flags "
        "(an answer decided by two tokens it does not copy): what the default "
        "generators generate, scored against planted evidence; default: all",
    )
    _prompt_options(bench)
    bench.add_argument(
        "--out",
        type=Path,
        default=Path("benchmark_results"),
        help="output directory; default: ./benchmark_results",
    )
    _common(bench)

    attribute = commands.add_parser(
        "attribute", help="write a whole dataset's attributions as Parquet shards"
    )
    _model_options(attribute, required=True)
    _data_options(attribute)
    attribute.add_argument("--out", type=Path, required=True, help="output directory")
    attribute.add_argument(
        "--shard-size",
        type=int,
        default=1000,
        help="rows per Parquet shard (the unit of resume); default: 1000",
    )
    attribute.add_argument(
        "--target",
        choices=("predicted", "label"),
        default="predicted",
        help="class to explain: the prediction or the gold label (needs "
        "--label-column); default: predicted",
    )
    _prompt_options(attribute)
    _sources_option(attribute, "with --prompt-column: ")
    _common(attribute)
    return parser


def _prompt_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prompt-column",
        help="explain a causal LM (--model): the column of prompts",
    )
    parser.add_argument(
        "--target-column",
        help="with --prompt-column: the continuations to explain; default: "
        "the model generates them greedily",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        help="tokens the causal LM generates without --target-column "
        "(ending at its first EOS); default: 25",
    )


def _sources_option(parser: argparse.ArgumentParser, scope: str = "") -> None:
    parser.add_argument(
        "--sources",
        choices=SOURCE_NAMES,
        default="tokens",
        help=f"{scope}score the prompt's tokens, or its sentences or lines "
        "(each the sum of its tokens' scores; docs/generation.rst); "
        "default: tokens",
    )


def _generation_parser(commands: Any) -> None:
    generation = commands.add_parser(
        "explain-generation",
        help="explain what a causal LM generates from one prompt",
        description="Explain a causal LM's continuation of one prompt, token by "
        f"token. Methods: {_names(GENERATION_METHOD_NAMES)}.",
    )
    generation.add_argument("prompt", help="the prompt to continue and explain")
    generation.add_argument(
        "--model",
        help="causal LM: a directory written by save_pretrained or a Hub model "
        "id; default: the built-in key-value recall generator (prompts like "
        "'k1 v2 v3 ; k4 v5 v6 ; k1'; trained on first use, then cached)",
    )
    generation.add_argument(
        "--revision", help="branch, tag or commit of a Hub --model; default: main"
    )
    generation.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the model repository's own code (only for repositories you "
        "trust); default: off",
    )
    generation.add_argument(
        "--tokenizer", help="tokenizer directory or Hub id; default: --model"
    )
    given = generation.add_mutually_exclusive_group()
    given.add_argument("--target", help="the continuation to explain (text)")
    given.add_argument(
        "--max-new-tokens",
        type=int,
        help="tokens to generate greedily when no --target; default: 25",
    )
    generation.add_argument(
        "--methods",
        nargs="+",
        metavar="NAME",
        help=f"method names (quote names with spaces): "
        f"{_names(GENERATION_METHOD_NAMES)}; default: all but Random",
    )
    generation.add_argument(
        "--chat",
        action="store_true",
        help="the prompt is a user message of the tokenizer's chat template",
    )
    _sources_option(generation)
    generation.add_argument(
        "--html", type=Path, help="also write target x prompt heatmaps here"
    )
    generation.add_argument(
        "--device", default="cpu", help="torch device; default: cpu"
    )
    generation.add_argument(
        "--dtype", choices=DTYPE_NAMES, default="float32", help="default: float32"
    )
    generation.add_argument(
        "--debug", action="store_true", help="show the traceback of an error"
    )


# ------------------------------------------------------------------ checks
def _check_utf8(argv: Sequence[str]) -> None:
    for value in argv:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            shown = value.encode("utf-8", "replace").decode("utf-8")
            raise ValueError(f"argument {shown!r} is not valid UTF-8") from None


def _check_writable_dir(directory: Path) -> None:
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


def _check_model(args: argparse.Namespace) -> None:
    r"""A missing or foreign local ``--model`` fails here, before torch is
    imported (a Hub id is resolved when the model is loaded)."""
    model = getattr(args, "model", None)
    if model is not None:
        from captum_ext.evaluation.hub import is_hub_id
        from captum_ext.evaluation.model_files import read_model_config

        if not is_hub_id(str(model)):
            read_model_config(Path(model))


def _check_writable_file(path: Path) -> None:
    if path.is_dir():
        raise ValueError(f"{str(path)!r} is a directory, not a file")
    _check_writable_dir(path.parent)


def _check_positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be >= 1, got {value}")


def _check_model_flags(args: argparse.Namespace) -> None:
    given = [flag for flag in ("revision", "tokenizer") if getattr(args, flag)]
    if args.model is None and (given or args.trust_remote_code):
        flags = [f"--{flag}" for flag in given] or ["--trust-remote-code"]
        raise ValueError(f"{flags[0]} applies to --model, which is not given")


def _progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "no_progress", False)


# ------------------------------------------------------------------ loading
def _user_model(args: argparse.Namespace, causal_lm: bool = False) -> Tuple[Any, Any]:
    r"""``--model`` and its tokenizer: a sequence classifier, or with
    ``causal_lm`` a causal language model."""
    from captum_ext.evaluation.models import load_causal_lm, load_classifier

    load = load_causal_lm if causal_lm else load_classifier
    return load(
        args.model,
        tokenizer=args.tokenizer,
        device=args.device,
        dtype=args.dtype,
        max_length=getattr(args, "max_length", None),
        revision=args.revision,
        trust_remote_code=args.trust_remote_code,
    )


def _user_file(args: argparse.Namespace, **columns: Any) -> Any:
    r"""``--data`` with the rows every command selects the same way
    (``--split``, ``--config-name``, ``--limit``, ``--seed``) and the
    command's ``columns`` keywords of ``load_data``."""
    from captum_ext.evaluation.data import load_data

    return load_data(
        args.data,
        split=args.split,
        config_name=args.config_name,
        limit=args.limit,
        seed=args.seed,
        **columns,
    )


def _user_prompts(args: argparse.Namespace) -> Any:
    return _user_file(
        args, text_column=args.prompt_column, continuation_column=args.target_column
    )


def _user_data(args: argparse.Namespace, model: Any) -> Any:
    config = model.config
    return _user_file(
        args,
        text_column=args.text_column,
        text_pair_column=args.text_pair_column,
        label_column=args.label_column,
        label2id=getattr(config, "label2id", None),
        num_labels=getattr(config, "num_labels", None),
    )


# ------------------------------------------------------------------ commands
def _write_page(path: Path, title: str, body: str) -> None:
    r"""``explain --html`` and ``explain-generation --html``: the page written
    to a temporary file, then renamed (a killed run leaves no torn page)."""
    from captum_ext._utils.atomic import write_text_atomically
    from captum_ext.visualization import html_page

    page = html_page(title, body)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, lambda handle: handle.write(page))
    print(f"wrote {path}")


def _check_explain_flags(
    args: argparse.Namespace, known: Sequence[str], kind: str, length: str
) -> None:
    r"""What ``explain`` and ``explain-generation`` check before loading
    anything: method names, model flags, the positive ``length`` flag, a
    writable ``--html`` and a ``--model`` that exists."""
    check_names(args.methods, known, kind)
    _check_model_flags(args)
    _check_positive(args, length)
    if args.html is not None:
        _check_writable_file(args.html)
    _check_model(args)


def _explain(args: argparse.Namespace) -> int:
    if not args.text.strip():
        raise ValueError("the text is empty: give some words to explain")
    _check_explain_flags(args, METHOD_NAMES, "method", "max_length")
    from captum_ext.evaluation.explain import explain
    from captum_ext.evaluation.models import resolve_device
    from captum_ext.visualization import (
        explanation_html,
        explanation_text,
        supports_color,
    )

    resolve_device(args.device)
    decoder_texts = None
    if args.model is not None:
        model, tokenizer = _user_model(args)
    else:
        from captum_ext.defaults.models import load_default_model, MAX_LENGTH
        from captum_ext.evaluation.tasks import default_decoder_texts

        model, tokenizer = load_default_model(args.task, device=args.device)
        args.max_length = args.max_length or MAX_LENGTH
        from captum_ext.evaluation.registry import needs_decoders

        # No --methods: explain's defaults, the decoded method included.
        if args.methods is None or needs_decoders(args.methods):
            decoder_texts = default_decoder_texts()
    explanation = explain(
        model,
        tokenizer,
        args.text,
        methods=args.methods,
        target=args.target,
        max_length=args.max_length,
        text_pair=args.text_pair,
        decoder_texts=decoder_texts,
    )
    print(explanation_text(explanation, color=supports_color(sys.stdout)))
    if args.html is not None:
        body = explanation_html(explanation, text=args.text)
        _write_page(args.html, "captum_ext explanation", body)
    return 0


def _explain_generation(args: argparse.Namespace) -> int:
    if not args.prompt.strip():
        raise ValueError("the prompt is empty: give some words to continue")
    if args.chat and args.sources != "tokens":
        raise ValueError("--sources applies to a plain prompt, not to --chat")
    _check_explain_flags(
        args, GENERATION_METHOD_NAMES, "method for generated text", "max_new_tokens"
    )
    from captum_ext.evaluation.explain_generation import explain_generation
    from captum_ext.evaluation.models import resolve_device
    from captum_ext.visualization import generation_html, generation_text

    resolve_device(args.device)
    if args.model is None:
        from captum_ext.defaults.generator import load_default_generator

        model, tokenizer = load_default_generator(device=args.device)
    else:
        model, tokenizer = _user_model(args, causal_lm=True)
    explanation = explain_generation(
        model,
        tokenizer,
        args.prompt,
        methods=args.methods,
        target=args.target,
        max_new_tokens=args.max_new_tokens,
        chat=args.chat,
        sources=args.sources,
    )
    print(generation_text(explanation))
    if args.html is not None:
        body = generation_html(explanation)
        _write_page(args.html, "captum_ext: explained generation", body)
    return 0


def _run_benchmark(args: argparse.Namespace) -> Any:
    from captum_ext.evaluation.options import (
        BenchmarkOptions,
        GenerationBenchmarkOptions,
    )

    options = BenchmarkOptions(
        methods=args.methods,
        metrics=args.metrics,
        batch_size=args.batch_size,
        max_length=args.max_length,
        device=args.device,
        progress=_progress(args),
    )
    if args.model is None:
        from captum_ext.evaluation.tasks import run_default_tasks

        return run_default_tasks(args.limit or args.n, args.tasks, options)
    task = Path(args.model).name or "data"
    if args.prompt_column is not None:
        from captum_ext.evaluation.generation_engine import run_generation_benchmark

        model, tokenizer = _user_model(args, causal_lm=True)
        generation = GenerationBenchmarkOptions(
            **vars(replace(options, task=task)), max_new_tokens=args.max_new_tokens
        )
        return run_generation_benchmark(
            model, tokenizer, _user_prompts(args), generation
        )
    from captum_ext.evaluation.engine import run_benchmark

    model, tokenizer = _user_model(args)
    data = _user_data(args, model)
    return run_benchmark(model, tokenizer, data, replace(options, task=task))


def _check_benchmark_names(args: argparse.Namespace) -> None:
    r"""``--methods`` and ``--metrics`` among those of the job: a causal LM's
    (``--prompt-column``), a classifier's (``--model``), or the built-in tasks'
    (each runs the chosen ones it knows)."""
    if args.prompt_column is not None:
        check_names(
            args.methods, GENERATION_METHOD_CHOICES, "method for generated text"
        )
        check_names(args.metrics, GENERATION_METRIC_NAMES, "metric for generated text")
        return
    check_names(args.methods, METHOD_CHOICES, "method")
    built_in = args.model is None
    check_names(args.metrics, ALL_METRIC_NAMES if built_in else METRIC_NAMES, "metric")


def _benchmark(args: argparse.Namespace) -> int:
    _check_benchmark_names(args)
    _check_model_flags(args)
    _check_positive(args, "n", "batch_size", "limit", "max_length", "max_new_tokens")
    _check_prompt_flags(args)
    if (args.model is None) != (args.data is None):
        raise ValueError(
            "give both --model and --data for your own model and data, "
            "or neither for the built-in tasks"
        )
    if os.environ.get("RANK", "0") == "0":
        _check_writable_dir(args.out)
    _check_model(args)
    from captum_ext.evaluation.distributed import distributed_context
    from captum_ext.evaluation.models import resolve_device

    resolve_device(args.device)
    if args.model is None and os.environ.get("RANK", "0") == "0":
        from captum_ext.evaluation.tasks import first_run_estimate

        estimate = first_run_estimate(args.tasks)
        if estimate:
            print(estimate, file=sys.stderr, flush=True)
    start = time.perf_counter()
    # One process group for all tasks (each benchmark call joins this one).
    with distributed_context(args.device) as ctx:
        result = _run_benchmark(args)
    if not ctx.is_main:
        return 0
    from captum_ext.evaluation.report import markdown_table, write_report

    paths = write_report(result, args.out)
    print(markdown_table(result))
    print()
    for kind, path in paths.items():
        print(f"{kind:>8}: {path}")
    print(
        f"total {duration(time.perf_counter() - start)} (benchmark "
        f"{duration(result.wall_seconds)}; the rest: preparing and loading models)"
    )
    return 0


def _check_prompt_flags(args: argparse.Namespace) -> None:
    r"""The flags of a causal LM's prompts (``attribute`` and ``benchmark``) go
    together, with ``--model``, and not with a classifier's."""
    if args.prompt_column is None:
        if getattr(args, "sources", "tokens") != "tokens":
            raise ValueError(
                "--sources applies to a causal LM's prompts: give --prompt-column "
                "too"
            )
        for flag in ("target_column", "max_new_tokens"):
            if getattr(args, flag) is not None:
                raise ValueError(
                    f"--{flag.replace('_', '-')} applies to a causal LM's "
                    "prompts: give --prompt-column too"
                )
        return
    if args.model is None:
        raise ValueError("--prompt-column applies to your causal LM: give --model")
    for flag in ("text_pair_column", "label_column"):
        if getattr(args, flag):
            raise ValueError(
                f"--{flag.replace('_', '-')} applies to classifiers, not to a "
                "causal LM's prompts (--prompt-column)"
            )
    if getattr(args, "target", "predicted") != "predicted":
        raise ValueError("--target applies to classifiers, not to --prompt-column")
    if args.target_column is not None and args.max_new_tokens is not None:
        raise ValueError(
            "--max-new-tokens applies when the model generates the continuations; "
            "--target-column gives them"
        )


def _attribute(args: argparse.Namespace) -> int:
    check_names(args.methods, METHOD_NAMES, "method")
    check_names(args.metrics, METRIC_NAMES, "metric")
    _check_positive(
        args, "batch_size", "limit", "max_length", "shard_size", "max_new_tokens"
    )
    _check_prompt_flags(args)
    if args.prompt_column is not None and args.metrics:
        raise ValueError(
            "--metrics applies to classifiers, not to a causal LM's prompts "
            "(--prompt-column); captum-ext benchmark scores those"
        )
    if args.data is None:
        raise ValueError("give --data FILE: the texts to attribute")
    if os.environ.get("RANK", "0") == "0":
        _check_writable_dir(args.out)
    _check_model(args)
    from captum_ext.evaluation.attribute import attribute_dataset
    from captum_ext.evaluation.explain import default_methods
    from captum_ext.evaluation.models import resolve_device

    resolve_device(args.device)
    if args.prompt_column is None:
        model, tokenizer = _user_model(args)
        data = _user_data(args, model)
        methods = args.methods or default_methods(with_decoders=False)
    else:
        model, tokenizer = _user_model(args, causal_lm=True)
        data = _user_prompts(args)
        methods = args.methods or list(GENERATION_DEFAULT_METHODS)
    path = attribute_dataset(
        model,
        tokenizer,
        data,
        methods,
        args.out,
        metrics=args.metrics,
        batch_size=args.batch_size,
        max_length=args.max_length,
        device=args.device,
        progress=_progress(args),
        shard_size=args.shard_size,
        target=args.target,
        max_new_tokens=args.max_new_tokens,
        sources=args.sources,
    )
    if os.environ.get("RANK", "0") == "0":  # one line per job, not per rank
        print(f"wrote {path}")
    return 0


# ------------------------------------------------------------------ entry
def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _show_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    print(f"captum-ext: notice: {_one_line(str(message))}", file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    r"""Entry point of the ``captum-ext`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        _check_utf8(argv)
    except ValueError as error:
        print(f"captum-ext: error: {error}", file=sys.stderr)
        return 2
    args = _parser().parse_args(argv)
    # Passive OpenMP waiting only works when set before torch is imported.
    configure_threads()
    commands: Dict[str, Callable[[argparse.Namespace], int]] = {
        "explain": _explain,
        "explain-generation": _explain_generation,
        "benchmark": _benchmark,
        "attribute": _attribute,
    }
    prefix = f"captum-ext {args.command}: error:"
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return commands[args.command](args)
    except KeyboardInterrupt:
        print(f"captum-ext {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: B902 - the CLI's one-line contract
        if args.debug:
            traceback.print_exc()
        known = isinstance(error, (ValueError, OSError, LookupError))
        detail = _one_line(str(error)) or type(error).__name__
        if not known:
            detail = f"{type(error).__name__}: {detail} (rerun with --debug)"
        print(f"{prefix} {detail}", file=sys.stderr)
        return 2 if known else 1


if __name__ == "__main__":
    sys.exit(main())
