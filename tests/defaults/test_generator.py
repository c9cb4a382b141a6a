#!/usr/bin/env python3
r"""The default generative model: caching by recipe fingerprint (a tiny recipe in
a temporary cache, fast) and, marked ``integration``, the trained model's
recall accuracy."""

import json
from pathlib import Path
from typing import Any, Dict, List, Sequence, Set, Tuple

import pytest
import torch
from captum_ext.defaults import generator
from captum_ext.defaults.flags import FlagTask
from captum_ext.defaults.generator import (
    generator_cache_name,
    GeneratorRecipe,
    load_default_generator,
    recall_accuracy,
    Task,
)
from captum_ext.defaults.recall import (
    encode_examples,
    recall_tokenizer,
    RecallExample,
    RecallTask,
)
from torch import nn, Tensor

from tests.defaults.conftest import TINY

# Measured 0.985 on these 1,000 held-out prompts (0.975 on the 512 of training.json);
# the issue asks for 0.95.
ACCURACY_FLOOR = 0.95


def _weights(model: nn.Module) -> Dict[str, Tensor]:
    return {name: p.detach().clone() for name, p in model.state_dict().items()}


def test_cached_once_loaded_identically_in_eval_mode(
    counted_training: List[GeneratorRecipe], tmp_path: Path
) -> None:
    model, tokenizer = load_default_generator(recipe=TINY)
    again, _ = load_default_generator(recipe=TINY)
    assert counted_training == [TINY]
    first, second = _weights(model), _weights(again)
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert not model.training
    assert model.config._attn_implementation == "eager"
    assert tokenizer.padding_side == "left"
    record = json.loads(
        (tmp_path / generator_cache_name(TINY) / "training.json").read_text()
    )
    assert record["fingerprint"] == TINY.fingerprint()
    assert record["steps"] == 1  # target 0.0 is reached at the first evaluation


def test_changed_recipe_trains_anew(
    counted_training: List[GeneratorRecipe], tmp_path: Path
) -> None:
    changed = GeneratorRecipe(**{**TINY.__dict__, "seed": 1})
    assert changed.fingerprint() != TINY.fingerprint()
    model, _ = load_default_generator(recipe=TINY)
    other, _ = load_default_generator(recipe=changed)
    assert counted_training == [TINY, changed]
    assert (tmp_path / generator_cache_name(changed)).is_dir()
    assert not torch.equal(
        model.get_input_embeddings().weight, other.get_input_embeddings().weight
    )


def test_training_is_deterministic(
    counted_training: List[GeneratorRecipe],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, _ = load_default_generator(recipe=TINY)
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path / "second"))
    again, _ = load_default_generator(recipe=TINY)
    assert len(counted_training) == 2
    first, second = _weights(model), _weights(again)
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_progress_lines_without_carriage_returns(
    counted_training: List[GeneratorRecipe], capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = GeneratorRecipe(**{**TINY.__dict__, "target_accuracy": 1.1})
    with pytest.raises(RuntimeError, match="below the recipe's 1.1"):
        load_default_generator(recipe=recipe)
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("default generator")]
    # The one progress reporter's plain lines: each step line with the time
    # taken and left, the last one at the last step with its held-out accuracy.
    steps = [line for line in lines if "/" in line]  # not the start and end lines
    assert steps and all("elapsed" in line and "ETA" in line for line in steps)
    assert f"{TINY.max_steps}/{TINY.max_steps} steps" in steps[-1]
    assert "held-out accuracy" in steps[-1]


def test_unreached_target_caches_nothing(
    counted_training: List[GeneratorRecipe], tmp_path: Path
) -> None:
    recipe = GeneratorRecipe(**{**TINY.__dict__, "target_accuracy": 1.1})
    with pytest.raises(RuntimeError):
        load_default_generator(recipe=recipe)
    assert not (tmp_path / generator_cache_name(recipe)).exists()


def test_the_shipped_recipe_keeps_its_cache_name() -> None:
    # train_task (None) is left out of the hash: the cache built before it existed
    assert generator_cache_name() == "default-generator-706d28d5f66a07e0"
    shorter = RecallTask(n_keys=4, n_values=4, min_pairs=1, max_pairs=1)
    other = GeneratorRecipe(**{**TINY.__dict__, "train_task": shorter})
    assert other.fingerprint() != TINY.fingerprint()


def test_train_task_is_trained_on_and_task_evaluated_on(
    counted_training: List[GeneratorRecipe], monkeypatch: pytest.MonkeyPatch
) -> None:
    shorter = RecallTask(n_keys=4, n_values=4, min_pairs=1, max_pairs=1)
    recipe = GeneratorRecipe(**{**TINY.__dict__, "train_task": shorter})
    sampled: List[Tuple[Task, Set[int]]] = []  # (task, pairs per prompt) per batch
    evaluated: List[int] = []  # pairs per held-out prompt
    sample, accuracy = generator._multi_query_batch, generator.recall_accuracy

    def training_batch(
        task: Task, examples: Sequence[RecallExample], *args: Any
    ) -> Tuple[Tensor, Tensor]:
        sampled.append((task, {e.prompt.count(";") for e in examples}))
        return sample(task, examples, *args)

    def held_out(
        model: Any,
        tokenizer: Any,
        examples: Sequence[RecallExample],
        batch_size: int = 256,
    ) -> float:
        evaluated.extend(e.prompt.count(";") for e in examples)
        return accuracy(model, tokenizer, examples, batch_size)

    monkeypatch.setattr(generator, "_multi_query_batch", training_batch)
    monkeypatch.setattr(generator, "recall_accuracy", held_out)
    model, _ = load_default_generator(recipe=recipe)
    assert sampled == [(shorter, {1})]  # one step: target 0.0
    assert set(evaluated) == {1, 2}  # TINY.task's 1-2 pairs
    assert model.config.max_position_embeddings >= TINY.task.longest_prompt()


def test_a_flag_recipe_trains_and_caches(
    counted_training: List[GeneratorRecipe], tmp_path: Path
) -> None:
    recipe = GeneratorRecipe(
        **{**TINY.__dict__, "task": FlagTask(min_words=2, max_words=6)}
    )
    model, tokenizer = load_default_generator(recipe=recipe)
    assert counted_training == [recipe]
    assert len(tokenizer) == len(FlagTask().vocabulary()) == model.config.vocab_size
    assert (tmp_path / generator_cache_name(recipe) / "training.json").is_file()


def test_spread_positions_keep_pairs_together_within_the_span() -> None:
    recipe = GeneratorRecipe(**{**TINY.__dict__, "position_span": 60})
    task = RecallTask(n_keys=4, n_values=4, min_pairs=3, max_pairs=4)
    tokenizer = recall_tokenizer(task)
    examples = task.sample(6, seed=0)
    input_ids, _ = generator._multi_query_batch(task, examples, tokenizer, 1, 0)
    positions = generator._spread_positions(input_ids, tokenizer, recipe, step=1)
    assert positions is not None  # for mypy: recipe has a position_span
    steps = positions.diff(dim=1)  # [batch, len - 1]
    after = input_ids[:, :-1] == tokenizer.convert_tokens_to_ids(";")
    assert bool((steps[~after] == 1).all())  # consecutive inside a pair
    assert bool((steps >= 1).all()) and int(positions.max()) < 60
    assert bool((steps[after] > 1).any())  # gaps after some separators
    same = generator._spread_positions(input_ids, tokenizer, recipe, step=1)
    assert same is not None and torch.equal(positions, same)
    assert generator._spread_positions(input_ids, tokenizer, TINY, 1) is None


def test_init_starts_from_that_recipes_model(
    counted_training: List[GeneratorRecipe], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = GeneratorRecipe(**{**TINY.__dict__, "init": TINY, "position_span": 40})
    assert recipe.fingerprint() != TINY.fingerprint()
    model, _ = load_default_generator(recipe=recipe)
    assert counted_training == [TINY, recipe]  # the init trained first
    assert model.config.max_position_embeddings == 64  # covers the span
    other = GeneratorRecipe(**{**TINY.__dict__, "task": FlagTask(min_words=2)})
    wrong = GeneratorRecipe(**{**other.__dict__, "init": TINY})
    with pytest.raises(ValueError, match="same vocabulary"):
        load_default_generator(recipe=wrong)


def test_long_prompts_are_evaluated_in_small_batches() -> None:
    # [batch, heads, L, L] float32 maps of one layer near 256 MiB at most
    assert generator._eval_batch_size(generator.DEFAULT_RECIPE.task) == 256
    long_task = RecallTask(n_keys=512, min_pairs=342, max_pairs=360, values_per_key=1)
    batch = generator._eval_batch_size(long_task)
    assert 1 <= batch <= 2**24 // long_task.longest_prompt() ** 2
    assert long_task.longest_prompt() >= 1024


@pytest.mark.integration
def test_default_generator_recalls_held_out_prompts() -> None:
    model, tokenizer = load_default_generator()
    recipe = generator.DEFAULT_RECIPE
    held_out = recipe.task.sample(1000, seed=recipe.seeds()[2] + 1)
    assert recall_accuracy(model, tokenizer, held_out) >= ACCURACY_FLOOR


@pytest.mark.integration
def test_long_recall_generator_recalls_over_1024_prompt_tokens() -> None:
    recipe = generator.LONG_RECALL_RECIPE
    model, tokenizer = load_default_generator(recipe=recipe)
    held_out = recipe.task.sample(64, seed=recipe.seeds()[2] + 1)
    assert min(len(tokenizer(e.prompt)["input_ids"]) for e in held_out) >= 1024
    assert recall_accuracy(model, tokenizer, held_out, batch_size=8) >= 0.9


@pytest.mark.integration
def test_flag_generator_solves_held_out_prompts() -> None:
    recipe = generator.FLAG_RECIPE
    model, tokenizer = load_default_generator(recipe=recipe)
    held_out = recipe.task.sample(1000, seed=recipe.seeds()[2] + 1)
    assert recall_accuracy(model, tokenizer, held_out) >= ACCURACY_FLOOR


@pytest.mark.integration
def test_greedy_generation_matches_the_teacher_forced_accuracy() -> None:
    model, tokenizer = load_default_generator()
    examples = generator.DEFAULT_RECIPE.task.sample(32, seed=123)
    batch = encode_examples(examples, tokenizer, end_token=True)
    generated = model.generate(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        max_new_tokens=batch.target.shape[1],
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )[:, batch.input_ids.shape[1] :]
    exact = [
        generated[row, : batch.target.shape[1]].tolist() == batch.target[row].tolist()
        for row in range(len(examples))
    ]
    for row, example in enumerate(examples):
        assert exact[row] == (recall_accuracy(model, tokenizer, [example]) == 1.0)


def test_training_sequences_start_with_the_evaluation_example() -> None:
    examples = RecallTask().sample(8, seed=0)
    tokenizer = recall_tokenizer(RecallTask())
    input_ids, labels = generator._multi_query_batch(
        RecallTask(), examples, tokenizer, 3, seed=0
    )
    batch = encode_examples(examples, tokenizer, end_token=True)
    for row, example in enumerate(examples):
        prompt = batch.input_ids[row][batch.attention_mask[row].bool()]
        joined = torch.cat([prompt, batch.target[row]])
        assert torch.equal(input_ids[row, : len(joined)], joined)
        # labelled: the answers and <eos> only, each a key's values in the prompt
        words = tokenizer.convert_ids_to_tokens(input_ids[row].tolist())
        labelled = [w for w, y in zip(words, labels[row].tolist()) if y != -100]
        assert labelled[:3] == example.continuation.split() + ["<eos>"]
        assert len(labelled) == 3 * min(4, example.prompt.count(";"))
        assert set(labelled) <= set(example.prompt.split()) | {"<eos>"}
