#!/usr/bin/env python3
r"""Calls on one model from several threads give exactly the single-threaded
results (``captum_ext/_utils/hooks.py``, "Thread safety"): every method and
metric, mixed, on one tiny model, compared bitwise to references computed one
call at a time."""

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Dict, List, Tuple

import peft  # a test dependency (setup.cfg [test])
import pytest
import torch
from captum_ext import classifier_forward
from captum_ext._utils.hooks import eval_semantics, model_lock
from captum_ext.metrics import (
    aopc,
    hiding_revealing,
    kendall_tau,
    log_odds,
    sufficiency,
)
from torch import nn, Tensor

from tests.attr.method_configs import METHOD_CONFIGS
from tests.helpers import assert_same_state, model_state, tiny_classifier, token_batch

THREADS = 4
CALLS_PER_THREAD = 50

Call = Callable[[], object]


def _calls(model: nn.Module) -> Dict[str, Call]:
    r"""Every method of ``tests/attr/method_configs.py`` and every metric as a
    no-argument call on one batch of ``model``."""
    batch = token_batch(lengths=(7, 4, 9))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    forward = classifier_forward(model)
    methods = {config.name: config.factory(model) for config in METHOD_CONFIGS}
    calls: Dict[str, Call] = {
        name: partial(method, ids, mask, None) for name, method in methods.items()
    }
    # The metrics score AttCAT's attributions, computed once up front; kendall_tau
    # calls LogAt itself, once per class, inside the metric (a method nested in a
    # metric on the same model).
    scores = calls["AttCAT"]()
    curve_metrics: List[Callable[..., object]] = [
        aopc,
        log_odds,
        sufficiency,
        hiding_revealing,
    ]
    for metric in curve_metrics:
        calls[metric.__name__] = partial(
            metric, forward, ids, scores, additional_forward_args=(mask,)
        )
    calls["kendall_tau"] = lambda: kendall_tau(
        forward,
        ids,
        partial(methods["LogAt"], ids, mask),
        additional_forward_args=(mask,),
    )
    return calls


def _tensors(result: object) -> List[Tensor]:
    r"""The tensors of a result: a tensor, or (nested) tuples such as
    ``MetricResult``."""
    if isinstance(result, Tensor):
        return [result]
    assert isinstance(result, tuple), type(result)
    return [t for part in result for t in _tensors(part)]


def _same(first: object, second: object) -> bool:
    try:
        for a, b in zip(_tensors(first), _tensors(second), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    except (AssertionError, ValueError):
        return False
    return True


def _schedule(names: List[str]) -> List[List[str]]:
    r"""Per thread, ``CALLS_PER_THREAD`` names: every call in every thread, in a
    different shuffled order per thread, so that all pairs overlap."""
    rng = random.Random(0)
    schedule = []
    for _ in range(THREADS):
        names_of_thread = [names[i % len(names)] for i in range(CALLS_PER_THREAD)]
        rng.shuffle(names_of_thread)
        schedule.append(names_of_thread)
    return schedule


def _run_threads(
    calls: Dict[str, Call], references: Dict[str, object]
) -> Tuple[List[str], List[str]]:
    r"""Runs the schedule; returns the mismatching calls and the exceptions."""

    def worker(names: List[str]) -> Tuple[List[str], List[str]]:
        mismatches, errors = [], []
        for name in names:
            try:
                result = calls[name]()
            except Exception as error:  # noqa: B902 (every failure is reported)
                errors.append(f"{name}: {type(error).__name__}: {error}")
                continue
            if not _same(result, references[name]):
                mismatches.append(name)
        return mismatches, errors

    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = list(pool.map(worker, _schedule(sorted(calls))))
    return (
        [name for mismatches, _ in outcomes for name in mismatches],
        [error for _, errors in outcomes for error in errors],
    )


@pytest.fixture(scope="module")
def model() -> nn.Module:
    return tiny_classifier("bert")


@pytest.fixture(scope="module")
def calls_and_references(model: nn.Module) -> Tuple[Dict[str, Call], Dict[str, object]]:
    r"""The calls and their single-threaded results, each checked to repeat
    bitwise (so any threaded difference comes from the threads)."""
    calls = _calls(model)
    references = {name: call() for name, call in calls.items()}
    repeats = [
        name for name, call in calls.items() if not _same(call(), references[name])
    ]
    assert repeats == []
    return calls, references


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.filterwarnings("ignore:the model is in training mode")
def test_threads_give_single_threaded_results(
    model: nn.Module,
    calls_and_references: Tuple[Dict[str, Call], Dict[str, object]],
    training: bool,
) -> None:
    calls, references = calls_and_references
    # The references were computed in eval mode: in train mode every call must
    # still run with eval semantics (no dropout) and give the same numbers.
    model.train(training)
    before = model_state(model)
    try:
        mismatches, errors = _run_threads(calls, references)
        after = model_state(model)
    finally:
        model.eval()
    assert errors == []
    assert mismatches == []
    assert_same_state(before, after)
    assert after["training"] == [training] * len(before["training"])  # type: ignore


def test_wrappers_share_the_lock(model: nn.Module) -> None:
    lock = model_lock(model)
    assert model_lock(classifier_forward(model)) is lock
    assert model_lock(model.base_model) is lock  # type: ignore[arg-type]
    assert model_lock(torch.compile(model)) is lock  # type: ignore[arg-type]
    assert model_lock(tiny_classifier("bert", seed=1)) is not lock


def test_peft_wrapper_shares_the_lock() -> None:
    model = tiny_classifier("bert")  # LoRA injects modules: a model of its own
    lock = model_lock(model)
    config = peft.LoraConfig(target_modules=["query", "value"], r=2)
    wrapped = peft.get_peft_model(model, config)
    assert model_lock(wrapped) is lock
    assert model_lock(wrapped.merge_and_unload()) is lock


@pytest.mark.filterwarnings("ignore:the model is in training mode")
def test_nested_blocks_restore_mixed_modes_also_on_error(model: nn.Module) -> None:
    model.train()
    model.base_model.encoder.layer[0].eval()  # type: ignore[union-attr,index]
    before = [m.training for m in model.modules()]
    try:
        with pytest.raises(RuntimeError, match="inside"):
            with eval_semantics(model):
                with eval_semantics(classifier_forward(model)):
                    assert not any(m.training for m in model.modules())
                    raise RuntimeError("inside")
        after = [m.training for m in model.modules()]
    finally:
        model.eval()
    assert after == before
    assert _free_in_another_thread(model)  # released by the raising block


def test_eval_semantics_holds_the_lock_of_every_wrapper(model: nn.Module) -> None:
    r"""Inside ``eval_semantics(model)`` another thread cannot take the lock of the
    model or of a wrapper of it; afterwards it can."""
    with eval_semantics(model):
        assert not _free_in_another_thread(classifier_forward(model))
    assert _free_in_another_thread(classifier_forward(model))


def _free_in_another_thread(model: Callable[..., Any]) -> bool:
    r"""Whether another thread can take ``model``'s lock at once (it releases it
    before ending)."""
    attempts: List[bool] = []

    def try_lock() -> None:
        lock = model_lock(model)  # type: ignore[arg-type]
        attempts.append(lock.acquire(blocking=False))
        if attempts[-1]:
            lock.release()

    thread = threading.Thread(target=try_lock)
    thread.start()
    thread.join()
    return attempts == [True]
