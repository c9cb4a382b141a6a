#!/usr/bin/env python3
r"""The default generators trained in a second process: the caller loads what
that process trained (the same weights as training in-process), nothing starts
when the cache has them, and a caller that raises stops the process."""

import multiprocessing
import time
from pathlib import Path
from typing import List

import pytest
import torch
from captum_ext.defaults.background import generators_trained_alongside
from captum_ext.defaults.cache import is_complete
from captum_ext.defaults.generator import (
    generator_cache_name,
    GeneratorRecipe,
    load_default_generator,
)

from tests.defaults.conftest import TINY

# Never reached: trains until max_steps, long enough to be stopped midway.
UNREACHABLE = GeneratorRecipe(
    **{**TINY.__dict__, "target_accuracy": 1.1, "max_steps": 100_000}
)


def _wait_for(directory: Path, seconds: float = 300.0) -> None:
    deadline = time.monotonic() + seconds
    while not is_complete(directory):
        assert time.monotonic() < deadline, f"{directory} not built in {seconds} s"
        time.sleep(0.2)


def test_the_caller_loads_what_the_second_process_trained(
    counted_training: List[GeneratorRecipe],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with generators_trained_alongside([TINY]) as started:
        assert started == [TINY]
        _wait_for(tmp_path / generator_cache_name(TINY))
        model, _ = load_default_generator(recipe=TINY)
    assert counted_training == []  # trained in the second process only
    assert multiprocessing.active_children() == []
    monkeypatch.setenv("CAPTUM_EXT_CACHE", str(tmp_path / "in-process"))
    here, _ = load_default_generator(recipe=TINY)
    assert counted_training == [TINY]
    theirs, ours = model.state_dict(), here.state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[name], ours[name]) for name in theirs)


def test_nothing_starts_when_the_cache_has_them(
    counted_training: List[GeneratorRecipe],
) -> None:
    load_default_generator(recipe=TINY)
    with generators_trained_alongside([TINY]) as started:
        assert started == []
        assert multiprocessing.active_children() == []


def test_a_raising_caller_stops_the_process(
    counted_training: List[GeneratorRecipe], tmp_path: Path
) -> None:
    with pytest.raises(KeyboardInterrupt):
        with generators_trained_alongside([UNREACHABLE]) as started:
            assert started == [UNREACHABLE]
            raise KeyboardInterrupt
    assert multiprocessing.active_children() == []
    assert not (tmp_path / generator_cache_name(UNREACHABLE)).exists()
