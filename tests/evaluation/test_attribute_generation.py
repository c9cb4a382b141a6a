#!/usr/bin/env python3
r"""``captum-ext attribute --prompt-column`` on a tiny random GPT-2 saved with a
tiny tokenizer: each row's ``[T][P]`` matrix equals the method run on that
prompt alone (given or greedily generated continuation), a damaged or missing
shard is redone to the uninterrupted result, the manifest refuses another
run's directory, two ranks under ``torchrun`` equal one process, and bad
inputs end in one line."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, List

import pandas as pd
import pytest
import torch
from captum_ext.attr._utils.continuations import generate_continuations
from captum_ext.cli import main
from captum_ext.evaluation.attribute.manifest import MANIFEST
from captum_ext.evaluation.names import GENERATION_METHOD_NAMES
from captum_ext.evaluation.registry import METHODS
from captum_ext.evaluation.user_models import load_causal_lm

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import save_tiny_model, tiny_causal_lm

ROOT = Path(__file__).resolve().parents[2]
METHOD_NAMES = ["LogAt", "AttCAT"]
PROMPTS = [
    "the cat sat on a mat",
    "what is colour of sky ?",
    "i like the big red dog",
    "hello",
    "it was a small blue house and the dog ran to it",
]
CONTINUATIONS = ["and ran", "blue", "it was big", ". the cat sat", "."]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    r"""The saved model, a prompt file with continuations and one without."""
    root = tmp_path_factory.mktemp("lm")
    model_dir = root / "gpt2"
    model: Any = tiny_causal_lm("gpt2", seed=3)  # a PreTrainedModel
    model.save_pretrained(model_dir)
    tiny_lm_tokenizer().save_pretrained(model_dir)
    given, bare = root / "given.jsonl", root / "prompts.jsonl"
    rows = [{"prompt": p, "continuation": c} for p, c in zip(PROMPTS, CONTINUATIONS)]
    given.write_text("".join(json.dumps(row) + "\n" for row in rows))
    bare.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return model_dir, given, bare


def attribute(model_dir: Path, data: Path, out: Path, *extra: str) -> int:
    return main(
        ["attribute", "--model", str(model_dir), "--data", str(data)]
        + ["--prompt-column", "prompt", "--out", str(out), "--no-progress"]
        + ["--methods", *METHOD_NAMES, "--shard-size", "2", *extra]
    )


def alone(model_dir: Path, prompt: str, continuation: List[int]):
    r"""Each method run directly on one prompt and its continuation ids."""
    model, tokenizer = load_causal_lm(model_dir)
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    target = torch.tensor([continuation])
    return {
        name: METHODS[name].build_generation(model, tokenizer)(
            ids, torch.ones_like(ids), target
        )[0]
        for name in METHOD_NAMES
    }


def assert_rows_equal_alone(
    model_dir: Path, table: pd.DataFrame, exact: bool = True
) -> None:
    r"""Every row equals its prompt run alone: exactly when the run had one
    prompt per batch, within float32 rounding when left padding changed the
    shapes of the matrix products."""
    tokenizer = tiny_lm_tokenizer()
    for row in table.itertuples():
        assert list(row.input_ids) == tokenizer(row.prompt)["input_ids"]
        assert list(row.tokens) == tokenizer.convert_ids_to_tokens(row.input_ids)
        expected = alone(model_dir, row.prompt, list(row.continuation_ids))
        for name in METHOD_NAMES:
            matrix = torch.tensor([list(step) for step in getattr(row, name)])
            assert matrix.shape == (len(row.continuation_ids), len(row.input_ids))
            assert matrix.dtype == torch.float32
            if exact:
                assert torch.equal(matrix, expected[name])
            else:
                torch.testing.assert_close(matrix, expected[name], rtol=1e-4, atol=1e-8)


@pytest.mark.parametrize("batch_size", ["1", "3"])
def test_given_continuations_equal_each_prompt_alone(files, tmp_path, batch_size):
    model_dir, given, _ = files
    out = tmp_path / "out"
    extra = ("--target-column", "continuation", "--batch-size", batch_size)
    assert attribute(model_dir, given, out, *extra) == 0
    table = pd.read_parquet(out)
    assert list(table["id"]) == list(range(5))
    assert list(table["continuation"]) == CONTINUATIONS
    tokenizer = tiny_lm_tokenizer()
    for row in table.itertuples():  # no BOS inside a continuation
        ids = tokenizer(row.continuation, add_special_tokens=False)["input_ids"]
        assert list(row.continuation_ids) == ids
    assert_rows_equal_alone(model_dir, table, exact=batch_size == "1")
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["arguments"]["mode"] == "causal_lm"
    assert manifest["arguments"]["continuations"] == "given"
    assert manifest["columns"] == {"texts": "prompt", "continuations": "continuation"}


def test_generated_continuations_are_greedy_and_recorded(files, tmp_path):
    model_dir, _, bare = files
    out = tmp_path / "out"
    extra = ("--max-new-tokens", "3", "--batch-size", "1")
    assert attribute(model_dir, bare, out, *extra) == 0
    table = pd.read_parquet(out)
    model, tokenizer = load_causal_lm(model_dir)
    for row in table.itertuples():
        ids = torch.tensor([tokenizer(row.prompt)["input_ids"]])
        greedy = generate_continuations(
            model, tokenizer, ids, torch.ones_like(ids), {"max_new_tokens": 3}
        )[0]
        assert list(row.continuation_ids) == greedy.tolist()
        assert row.continuation == tokenizer.decode(greedy)
    assert_rows_equal_alone(model_dir, table)
    arguments = json.loads((out / MANIFEST).read_text())["arguments"]
    assert (arguments["continuations"], arguments["max_new_tokens"]) == ("generated", 3)


def test_resume_redoes_missing_and_damaged_shards(files, tmp_path, capsys):
    model_dir, given, _ = files
    extra = ("--target-column", "continuation")
    assert attribute(model_dir, given, tmp_path / "whole", *extra) == 0
    out = tmp_path / "out"
    assert attribute(model_dir, given, out, *extra) == 0
    (out / "part-00000.parquet").unlink()
    damaged = out / "part-00002.parquet"
    damaged.write_bytes(damaged.read_bytes()[:40])
    capsys.readouterr()
    assert attribute(model_dir, given, out, *extra) == 0
    assert "part-00002.parquet is redone" in capsys.readouterr().err
    pd.testing.assert_frame_equal(
        pd.read_parquet(out), pd.read_parquet(tmp_path / "whole")
    )


def test_manifest_refuses_another_run(files, tmp_path, capsys):
    model_dir, given, bare = files
    out = tmp_path / "out"
    assert attribute(model_dir, given, out, "--target-column", "continuation") == 0
    capsys.readouterr()
    assert attribute(model_dir, bare, out, "--max-new-tokens", "2") == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "holds attributions of another run" in error
    assert "arguments.continuations: 'given' before, 'generated' now" in error


def _torchrun(model_dir: Path, data: Path, out: Path, ranks: int):
    launch = [sys.executable]
    if ranks > 1:
        launch += ["-m", "torch.distributed.run", "--standalone"]
        launch += ["--nnodes", "1", "--nproc-per-node", str(ranks)]
    command = launch + ["-m", "captum_ext.cli", "attribute"]
    command += ["--model", str(model_dir), "--data", str(data), "--out", str(out)]
    command += ["--prompt-column", "prompt", "--max-new-tokens", "3"]
    command += ["--methods", *METHOD_NAMES, "--shard-size", "2", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.update(GLOO_SOCKET_IFNAME="lo")
    env.pop("WORLD_SIZE", None)
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_two_ranks_equal_one_process(files, tmp_path):
    model_dir, _, bare = files
    _torchrun(model_dir, bare, tmp_path / "one", ranks=1)
    _torchrun(model_dir, bare, tmp_path / "two", ranks=2)
    shards = sorted(p.name for p in (tmp_path / "two").glob("part-*.parquet"))
    assert shards == [f"part-0000{k}.parquet" for k in range(3)]
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "two"), pd.read_parquet(tmp_path / "one")
    )


@pytest.mark.parametrize(
    "options, message",
    [
        (["--prompt-column", "question"], "no column 'question'"),
        (["--max-new-tokens", "2", "--target-column", "continuation"], "--target-c"),
        (["--metrics", "aopc"], "--metrics applies to classifiers"),
        (["--methods", "Saliency"], "Saliency cannot explain a causal LM's text"),
        (["--target-column", "prompt", "--max-length", "8"], "more than max_len"),
    ],
)
def test_bad_inputs_end_in_one_line(files, tmp_path, capsys, options, message):
    model_dir, given, _ = files
    command = ["attribute", "--model", str(model_dir), "--data", str(given)]
    command += ["--out", str(tmp_path / "out"), "--prompt-column", "prompt"]
    assert main(command + options) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error, error
    assert not (tmp_path / "out").exists()


def test_empty_prompt_ends_in_one_line(files, tmp_path, capsys):
    model_dir, _, _ = files
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "the cat"}\n{"prompt": "  "}\n')
    assert attribute(model_dir, data, tmp_path / "out") == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "empty 'prompt' in row(s) 1" in error


def test_classifier_with_prompt_column_ends_in_one_line(files, tmp_path, capsys):
    _, given, _ = files
    classifier = Path(str(save_tiny_model(tmp_path / "bert")))
    assert attribute(classifier, given, tmp_path / "out") == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "BertForSequenceClassification, not a causal LM" in error


def test_causal_lm_without_prompt_column_ends_in_one_line(files, tmp_path, capsys):
    model_dir, given, _ = files
    command = ["attribute", "--model", str(model_dir), "--data", str(given)]
    assert main(command + ["--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--prompt-column" in error


@pytest.mark.parametrize("kind", ["sentences", "lines"])
def test_sources_sum_each_rows_token_scores(files, tmp_path, kind):
    r"""``--sources``: a ``sources`` column whose texts make up the prompt, and
    each method's rows summed over each source's tokens (one token per word
    after <s>) of the token run's rows."""
    model_dir, _, _ = files
    data = tmp_path / "prompts.jsonl"
    prompts = ["the cat sat . on a mat\nit was big .", "hello", "a dog ran .\n\nblue"]
    data.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    extra = ("--max-new-tokens", "2", "--batch-size", "2")
    assert attribute(model_dir, data, tmp_path / "tokens", *extra) == 0
    assert attribute(model_dir, data, tmp_path / kind, *extra, "--sources", kind) == 0
    tokens, by_source = (pd.read_parquet(tmp_path / k) for k in ("tokens", kind))
    assert "sources" not in tokens.columns
    manifest = json.loads((tmp_path / kind / MANIFEST).read_text())
    assert manifest["arguments"]["sources"] == kind
    for token_row, row in zip(tokens.itertuples(), by_source.itertuples()):
        assert "".join(row.sources) == row.prompt
        assert list(row.continuation_ids) == list(token_row.continuation_ids)
        sizes = [len(source.split()) for source in row.sources]
        for name in METHOD_NAMES:
            matrix = torch.tensor([list(step) for step in getattr(token_row, name)])
            expected = torch.stack([s.sum(1) for s in matrix[:, 1:].split(sizes, 1)], 1)
            got = torch.tensor([list(step) for step in getattr(row, name)])
            torch.testing.assert_close(got, expected)
    assert [len(s) for s in by_source["sources"]] == (
        [3, 1, 2] if kind == "sentences" else [2, 1, 2]
    )


def test_sources_without_prompt_column_end_in_one_line(tmp_path, capsys):
    classifier = Path(str(save_tiny_model(tmp_path / "bert")))
    data = tmp_path / "texts.jsonl"
    data.write_text('{"text": "the cat"}\n')
    command = ["attribute", "--model", str(classifier), "--data", str(data)]
    assert main(command + ["--out", str(tmp_path / "out"), "--sources", "lines"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--sources applies to a causal LM" in error


def test_the_guide_lists_every_accepted_method(files, tmp_path):
    r"""docs/guide/attribute.rst names exactly the methods ``--prompt-column``
    accepts: every method that explains generated text."""
    guide = " ".join((ROOT / "docs" / "guide" / "attribute.rst").read_text().split())
    listed = guide.split("explains generated text): ")[1].split(" (default")[0]
    accepted = [name for name, spec in METHODS.items() if spec.causal_lm]
    assert listed.split(", ") == list(GENERATION_METHOD_NAMES) == accepted
    model_dir, given, _ = files
    out = tmp_path / "out"
    command = ["attribute", "--model", str(model_dir), "--data", str(given)]
    command += ["--prompt-column", "prompt", "--target-column", "continuation"]
    command += ["--out", str(out), "--no-progress", "--methods", "GlobEnc", "Random"]
    assert main(command) == 0
    assert {"GlobEnc", "Random"} <= set(pd.read_parquet(out).columns)
