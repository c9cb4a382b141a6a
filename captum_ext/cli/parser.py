#!/usr/bin/env python3
r"""The ``captum-ext`` parser, built from the option records of
:mod:`~captum_ext.cli.options`, and the one place a parsed
:class:`argparse.Namespace` becomes a command's record."""

import argparse
from dataclasses import Field
from typing import Any, Dict, List, Mapping, NamedTuple, NoReturn, Sequence, Tuple, Type

from captum_ext.cli.options import (
    AttributeCommand,
    BenchmarkCommand,
    DebugOption,
    ExplainCommand,
    ExplainGenerationCommand,
    flag,
    names,
    option_fields,
)
from captum_ext.evaluation.names import GENERATION_METHOD_NAMES, METHOD_NAMES
from captum_ext.evaluation.options import DEFAULT_MAX_NEW_TOKENS

__all__ = ["build_parser", "CommandLine", "parse_command"]

# What a flag shared with other commands says or requires in one command only.
Overrides = Mapping[str, Mapping[str, Any]]

_GENERATION: Overrides = {
    "model": {
        "help": "causal LM: a directory written by save_pretrained or a Hub "
        "model id; default: the built-in key-value recall generator (prompts "
        "like 'k1 v2 v3 ; k4 v5 v6 ; k1'; trained on first use, then cached)"
    },
    "methods": {
        "help": f"method names (quote names with spaces): "
        f"{names(GENERATION_METHOD_NAMES)}; default: all but Random"
    },
    # --target or --max-new-tokens: the continuation given, or generated.
    "target": {"group": "continuation"},
    "max_new_tokens": {
        "help": "tokens to generate greedily when no --target; default: "
        f"{DEFAULT_MAX_NEW_TOKENS}",
        "group": "continuation",
    },
}
_ATTRIBUTE: Overrides = {
    "model": {"required": True},
    "sources": {"scope": "with --prompt-column: "},
}


class _Parser(argparse.ArgumentParser):
    r"""Argument errors in one line (no usage block above them)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _in_help_order(record: Type[Any], overrides: Overrides) -> List["Field[Any]"]:
    r"""The command's own options first, then those of its groups; the members
    of a mutually exclusive group together (argparse shows them as one
    ``[--a A | --b B]``)."""
    own = vars(record).get("__annotations__", {})
    ordered = sorted(option_fields(record), key=lambda f: f.name not in own)
    group = {name: keys["group"] for name, keys in overrides.items() if "group" in keys}
    first: Dict[str, int] = {}
    for position, declaration in enumerate(ordered):
        first.setdefault(group.get(declaration.name, declaration.name), position)
    return sorted(ordered, key=lambda f: first[group.get(f.name, f.name)])


def add_options(
    parser: argparse.ArgumentParser, record: Type[Any], overrides: Overrides = {}
) -> None:
    r"""One argument per option field of ``record`` with the field's default;
    ``overrides`` replace a field's keywords (``help``, ``required``), put it
    in a mutually exclusive ``group`` or start its help with a ``scope``."""
    groups: Dict[str, Any] = {}
    for declaration in _in_help_order(record, overrides):
        meta = declaration.metadata
        keywords = {**meta["argument"], "help": meta["help"]}
        keywords.update(overrides.get(declaration.name, {}))
        keywords.pop("flag", None)
        keywords["help"] = keywords.pop("scope", "") + keywords["help"]
        group = keywords.pop("group", None)
        target: Any = parser
        if group is not None:
            if group not in groups:
                groups[group] = parser.add_mutually_exclusive_group()
            target = groups[group]
        if meta["positional"]:
            target.add_argument(declaration.name, **keywords)
            continue
        factory = meta["factory"]
        default = declaration.default if factory is None else factory()
        target.add_argument(
            flag(declaration), dest=declaration.name, default=default, **keywords
        )


def build_parser() -> argparse.ArgumentParser:
    r"""The ``captum-ext`` parser: one subcommand per command record."""
    parser = _Parser(
        prog="captum-ext",
        description="Transformer token attributions and faithfulness metrics "
        "for Captum.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    subcommands: Sequence[Tuple[str, Type[Any], Dict[str, Any], Overrides]] = [
        (
            "explain",
            ExplainCommand,
            dict(
                help="explain one text with every method",
                description=f"Explain one text. Methods: {names(METHOD_NAMES)}.",
            ),
            {},
        ),
        (
            "explain-generation",
            ExplainGenerationCommand,
            dict(
                help="explain what a causal LM generates from one prompt",
                description="Explain a causal LM's continuation of one prompt, "
                f"token by token. Methods: {names(GENERATION_METHOD_NAMES)}.",
            ),
            _GENERATION,
        ),
        (
            "benchmark",
            BenchmarkCommand,
            dict(
                help="score methods with metrics on your model and data, or the "
                "built-in tasks"
            ),
            {},
        ),
        (
            "attribute",
            AttributeCommand,
            dict(help="write a whole dataset's attributions as Parquet shards"),
            _ATTRIBUTE,
        ),
    ]
    for name, record, texts, overrides in subcommands:
        subparser = commands.add_parser(name, **texts)
        add_options(subparser, record, overrides)
        add_options(subparser, DebugOption)
        subparser.set_defaults(record=record)
    return parser


class CommandLine(NamedTuple):
    r"""A parsed command line: the subcommand, its record and ``--debug``."""

    command: str
    options: Any
    debug: bool


def parse_command(argv: Sequence[str]) -> CommandLine:
    r"""The parsed ``argv`` (argparse exits on bad arguments)."""
    namespace = build_parser().parse_args(argv)
    record = namespace.record
    values = {f.name: getattr(namespace, f.name) for f in option_fields(record)}
    return CommandLine(namespace.command, record(**values), namespace.debug)
