#!/usr/bin/env python3
r"""The ``captum-ext`` command line.

``captum-ext explain "text"`` prints the prediction and every method's token
scores; ``captum-ext benchmark`` scores every method with every metric on the
held-out splits of the default tasks and writes a report. Run ``captum-ext
COMMAND --help`` for the options.
"""

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

__all__ = ["load_local_model", "main"]

TASKS = ("sentiment", "source")
# Fits the 15-minute budget on 2 CPU cores with first-time model preparation.
DEFAULT_N = 64


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="captum-ext",
        description="Transformer token attributions and faithfulness metrics "
        "for Captum.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    explain = commands.add_parser("explain", help="explain one text with every method")
    explain.add_argument("text", help="the text to classify and explain")
    explain.add_argument(
        "--task",
        choices=TASKS,
        default="sentiment",
        help="default model to use (ignored with --model); default: sentiment",
    )
    explain.add_argument(
        "--model",
        type=Path,
        help="local Hugging Face sequence-classifier directory (save_pretrained)",
    )
    explain.add_argument("--methods", nargs="+", help="method names; default: all")
    explain.add_argument(
        "--target", type=int, help="class index to explain; default: the prediction"
    )
    explain.add_argument("--html", type=Path, help="also write an HTML page here")
    explain.add_argument("--device", default="cpu", help="torch device; default: cpu")

    bench = commands.add_parser(
        "benchmark", help="score every method with every metric on the default tasks"
    )
    bench.add_argument(
        "--n",
        type=int,
        default=DEFAULT_N,
        help=f"held-out examples per task; default: {DEFAULT_N}",
    )
    bench.add_argument("--methods", nargs="+", help="method names; default: all")
    bench.add_argument("--metrics", nargs="+", help="metric names; default: all")
    bench.add_argument(
        "--tasks", nargs="+", choices=TASKS, default=list(TASKS), help="default: both"
    )
    bench.add_argument(
        "--out",
        type=Path,
        default=Path("benchmark_results"),
        help="output directory; default: ./benchmark_results",
    )
    bench.add_argument("--batch-size", type=int, default=16, help="default: 16")
    bench.add_argument("--device", default="cpu", help="torch device; default: cpu")
    bench.add_argument(
        "--no-progress", action="store_true", help="no progress bars on stderr"
    )
    return parser


def load_local_model(path: Path, device: str = "cpu") -> Tuple[Any, Any]:
    r"""A sequence classifier and its tokenizer from a local directory, never
    contacting a hub; eager attention so attention-reading methods work."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(
        path, attn_implementation="eager", local_files_only=True
    )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model.to(device).eval(), tokenizer


def _explain(args: argparse.Namespace) -> int:
    from captum_ext.benchmark import explain_text
    from captum_ext.visualization import (
        explanation_html,
        explanation_text,
        html_page,
        supports_color,
    )

    if args.model is not None:
        model, tokenizer = load_local_model(args.model, args.device)
    else:
        from captum_ext.default_models import load_default_model

        model, tokenizer = load_default_model(args.task, device=args.device)
    explanation = explain_text(
        model, tokenizer, args.text, methods=args.methods, target=args.target
    )
    print(explanation_text(explanation, color=supports_color(sys.stdout)))
    if args.html is not None:
        body = explanation_html(explanation, text=args.text)
        args.html.write_text(html_page("captum_ext explanation", body))
        print(f"wrote {args.html}")
    return 0


def _benchmark(args: argparse.Namespace) -> int:
    from captum_ext.benchmark import default_tasks, run_benchmark
    from captum_ext.report import markdown_table, write_report

    start = time.perf_counter()
    tasks = default_tasks(args.n, args.tasks, device=args.device)
    result = run_benchmark(
        tasks,
        methods=args.methods,
        metrics=args.metrics,
        batch_size=args.batch_size,
        device=args.device,
        progress=not args.no_progress,
    )
    paths = write_report(result, args.out)
    print(markdown_table(result))
    print()
    for kind, path in paths.items():
        print(f"{kind:>8}: {path}")
    print(
        f"benchmark {result.wall_seconds:.0f} s; total with model loading "
        f"{time.perf_counter() - start:.0f} s"
    )
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    r"""Entry point of the ``captum-ext`` console script."""
    args = _parser().parse_args(argv)
    # Models are local files only; set before transformers is first imported
    # (the heavy imports happen inside the commands, which also keeps --help
    # fast).
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    commands = {"explain": _explain, "benchmark": _benchmark}
    try:
        return commands[args.command](args)
    except (ValueError, OSError) as error:
        print(f"captum-ext {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
