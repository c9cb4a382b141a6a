#!/usr/bin/env python3
r"""Captum's own methods and plain predictions running in other threads beside
captum_ext's hook-based methods on the same model: every call gives exactly its
single-threaded result, on both sides (a server that predicts in some threads
while it explains in another)."""

from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Dict, List

import torch
from captum.attr import InputXGradient, IntegratedGradients, Saliency
from captum_ext import classifier_forward
from torch import Tensor

from tests.attr.method_configs import METHOD_CONFIGS
from tests.helpers import tiny_classifier, token_batch

ROUNDS = 12
CAPTUM_THREADS = 2


def _captum_call(
    method: Any, embeds: Tensor, target: Tensor, mask: Tensor, options: dict
) -> Tensor:
    # Each call its own copy: Captum sets and resets requires_grad on the input
    # tensor it is given, so threads sharing one input tensor race each other.
    return method.attribute(
        embeds.clone(), target=target, additional_forward_args=(mask,), **options
    )


def _calls() -> Dict[str, Callable[[], Tensor]]:
    model = tiny_classifier("bert", dtype=torch.float64)
    batch = token_batch(lengths=(7, 4, 9))
    ids, mask = batch["input_ids"], batch["attention_mask"]
    ours = {c.name: c.factory(model) for c in METHOD_CONFIGS}
    calls: Dict[str, Callable[[], Tensor]] = {
        name: partial(ours[name], ids, mask, None)
        for name in ("GlobEnc-N_enc", "AttCAT", "NormXLogit")
    }
    embeds = model.get_input_embeddings()(ids).detach()  # [batch, pos, d_model]
    on_embeds = classifier_forward(model, inputs_embeds=True)
    target = torch.tensor([0, 1, 2])
    for name, method in (
        ("Saliency", Saliency),
        ("InputXGradient", InputXGradient),
        ("IntegratedGradients", IntegratedGradients),
    ):
        options = {"n_steps": 4} if method is IntegratedGradients else {}
        calls[name] = partial(
            _captum_call, method(on_embeds), embeds, target, mask, options
        )
    predict = classifier_forward(model)
    calls["prediction"] = lambda: predict(ids, mask).detach()
    return calls


def test_captum_threads_beside_hook_based_methods() -> None:
    calls = _calls()
    references = {name: call() for name, call in calls.items()}
    captum = ["Saliency", "InputXGradient", "IntegratedGradients", "prediction"]
    ours = ["GlobEnc-N_enc", "AttCAT", "NormXLogit"]

    def worker(names: List[str]) -> List[str]:
        wrong = []
        for round_ in range(ROUNDS):
            name = names[round_ % len(names)]
            try:
                same = torch.equal(calls[name](), references[name])
            except Exception as error:  # noqa: B902 (every failure is reported)
                wrong.append(f"{name}: {type(error).__name__}: {error}")
                continue
            if not same:
                wrong.append(f"{name}: differs")
        return wrong

    schedules = [captum[k:] + captum[:k] for k in range(CAPTUM_THREADS)] + [ours]
    with ThreadPoolExecutor(len(schedules)) as pool:
        outcomes = list(pool.map(worker, schedules))
    assert [wrong for outcome in outcomes for wrong in outcome] == []
