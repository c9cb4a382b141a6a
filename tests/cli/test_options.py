#!/usr/bin/env python3
r"""captum_ext.cli.options: every flag is one declared field, the parser's
defaults are the records', and the commands receive records, never the
argparse Namespace."""

import argparse
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Dict, List

import pytest
from captum_ext.cli import entry
from captum_ext.cli.checks import check_positive_options
from captum_ext.cli.commands import job_options
from captum_ext.cli.options import (
    AttributeCommand,
    BenchmarkCommand,
    DebugOption,
    ExplainCommand,
    ExplainGenerationCommand,
    flag,
    ModelOptions,
    option_fields,
)
from captum_ext.cli.parser import build_parser, parse_command
from captum_ext.evaluation.options import (
    BenchmarkOptions,
    GenerationBenchmarkOptions,
    JobOptions,
)

RECORDS = {
    "explain": ExplainCommand,
    "explain-generation": ExplainGenerationCommand,
    "benchmark": BenchmarkCommand,
    "attribute": AttributeCommand,
}
REQUIRED = {
    "explain": ["a text"],
    "explain-generation": ["a prompt"],
    "benchmark": [],
    "attribute": ["--model", "m", "--out", "o"],
}


def _subparsers() -> Dict[str, argparse.ArgumentParser]:
    (action,) = [
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    return dict(action.choices)


def _flags(parser: argparse.ArgumentParser) -> List[argparse.Action]:
    return [a for a in parser._actions if a.option_strings != ["-h", "--help"]]


@pytest.mark.parametrize("command", list(RECORDS))
def test_every_argument_is_one_field_of_the_commands_record(command):
    record = RECORDS[command]
    declared = {f.name: f for f in option_fields(record) + option_fields(DebugOption)}
    actions = _flags(_subparsers()[command])
    assert sorted(a.dest for a in actions) == sorted(declared)
    for action in actions:
        field = declared[action.dest]
        if action.option_strings:
            assert action.option_strings == [flag(field)]


def test_the_model_flags_are_the_same_declaration_in_every_command():
    shared = [f.name for f in fields(ModelOptions) if f.name != "model"]
    assert shared == ["revision", "trust_remote_code", "tokenizer", "device", "dtype"]
    seen: Dict[str, Any] = {}
    for command, parser in _subparsers().items():
        for action in _flags(parser):
            if action.dest in shared + ["debug"]:
                shown = (action.help, action.default, action.choices, action.nargs)
                assert seen.setdefault(action.dest, shown) == shown, command
    assert sorted(seen) == sorted(shared + ["debug"])


@pytest.mark.parametrize("command", list(RECORDS))
def test_the_parsers_defaults_are_the_records_defaults(command):
    parsed = parse_command([command, *REQUIRED[command]])
    given: Dict[str, Dict[str, Any]] = {
        "explain": {"text": "a text"},
        "explain-generation": {"prompt": "a prompt"},
        "attribute": {"model": "m", "out": Path("o")},
    }
    assert parsed.options == RECORDS[command](**given.get(command, {}))
    assert parsed.command == command and parsed.debug is False


def test_job_defaults_come_from_the_jobs_own_record():
    assert BenchmarkCommand().batch_size == JobOptions.batch_size == 16
    assert BenchmarkCommand().progress is JobOptions.progress is True
    assert parse_command(["benchmark", "--no-progress"]).options.progress is False


def test_the_jobs_record_is_built_from_the_same_names():
    argv = ["benchmark", "--methods", "AttCAT", "--metrics", "aopc"]
    argv += ["--batch-size", "4", "--max-length", "32", "--no-progress"]
    options = parse_command(argv + ["--max-new-tokens", "3"]).options
    expected = BenchmarkOptions(
        methods=["AttCAT"],
        metrics=["aopc"],
        batch_size=4,
        max_length=32,
        device="cpu",
        progress=False,
        task="x",
    )
    assert job_options(BenchmarkOptions, options, task="x") == expected
    generation = job_options(GenerationBenchmarkOptions, options, task="x")
    assert generation == GenerationBenchmarkOptions(**vars(expected), max_new_tokens=3)


def test_the_positive_options_are_declared_so():
    positive = {
        flag(f)
        for record in RECORDS.values()
        for f in option_fields(record)
        if f.metadata["positive"]
    }
    assert positive == {
        "--n",
        "--batch-size",
        "--limit",
        "--max-length",
        "--shard-size",
        "--max-new-tokens",
    }
    for name in ("n", "batch_size", "limit", "max_length", "max_new_tokens"):
        zero: Dict[str, Any] = {name: 0}
        with pytest.raises(ValueError, match=f"--{name.replace('_', '-')} must be"):
            check_positive_options(replace(BenchmarkCommand(), **zero))
    check_positive_options(BenchmarkCommand(limit=1, seed=0))


@pytest.mark.parametrize("command", list(RECORDS))
def test_a_command_receives_its_record(monkeypatch, command):
    received: List[Any] = []

    def run(options: Any) -> int:
        received.append(options)
        return 0

    monkeypatch.setitem(entry.COMMANDS, command, run)
    assert entry.main([command, *REQUIRED[command]]) == 0
    (options,) = received
    assert type(options) is RECORDS[command]
    assert not isinstance(options, argparse.Namespace)
