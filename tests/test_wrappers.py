#!/usr/bin/env python3
r"""Every method on a wrapped tiny BERT (peft LoRA merged or not, torch.compile,
DataParallel) gives the attributions of the equivalent unwrapped model.

torch.compile runs with ``backend="eager"``: the default inductor backend takes
~50 s to compile the tiny BERT on a 2-core CPU, too slow for the unit suite; the
adapter unwraps the ``OptimizedModule`` before any backend is involved.
"""

import copy
from typing import List

import peft  # a test dependency (setup.cfg [test])
import pytest
import torch
import transformers
from captum_ext import get_adapter, UnsupportedModelError
from captum_ext.adapters import unwrap_model
from torch import nn, Tensor

from tests.attr.method_configs import METHOD_CONFIGS, MethodConfig
from tests.helpers import assert_same_state, model_state, tiny_classifier, token_batch

CONFIGS = pytest.mark.parametrize("config", METHOD_CONFIGS, ids=str)
BY_NAME = {config.name: config for config in METHOD_CONFIGS}
# LoRA on every projection but the attention output, whose weight GlobEnc reads.
UNMERGED_TARGETS = ["query", "key", "value", "intermediate.dense"]
ALL_TARGETS = ["query", "key", "value", "dense"]


def _attribute(model: nn.Module, config: MethodConfig) -> Tensor:
    batch = token_batch()
    return config.factory(model)(batch["input_ids"], batch["attention_mask"], 1)


def _lora(targets: List[str], seed: int = 1) -> peft.PeftModel:
    r"""A LoRA sequence classifier with non-zero adapters and a retrained copy of
    the classifier (``modules_to_save``), so a method that bypassed either would
    explain another model."""
    config = peft.LoraConfig(
        task_type=peft.TaskType.SEQ_CLS,
        r=4,
        lora_alpha=8,
        target_modules=targets,
        init_lora_weights=False,  # random B: the adapters change the output
    )
    torch.manual_seed(seed)
    model = peft.get_peft_model(tiny_classifier("bert"), config).eval()
    classifier = model.get_submodule(
        "base_model.model.classifier.modules_to_save.default"
    )
    assert isinstance(classifier, nn.Linear)  # for mypy: BERT's classifier head
    with torch.no_grad():
        classifier.weight.add_(torch.randn_like(classifier.weight))
    return model


def _merged_copy(peft_model: peft.PeftModel) -> nn.Module:
    r"""The plain transformers model that computes what ``peft_model`` computes."""
    return copy.deepcopy(peft_model).merge_and_unload().eval()


def _merged_in_place(targets: List[str]) -> peft.PeftModel:
    model = _lora(targets)
    model.merge_adapter()  # LoRA layers stay, their deltas now in the weights
    return model


def _compiled(model: nn.Module) -> nn.Module:
    compiled = torch.compile(model, backend="eager")
    # torch.compile wraps a module in an OptimizedModule, an nn.Module; its
    # annotation only says "a callable with the module's signature".
    assert isinstance(compiled, nn.Module)
    return compiled


def _assert_same_attributions(
    wrapped: nn.Module, plain: nn.Module, config: MethodConfig
):
    before = model_state(wrapped)
    got = _attribute(wrapped, config)
    assert_same_state(before, model_state(wrapped))
    expected = _attribute(plain, config)
    # Relative to the scores' scale: the decoded scores of a tiny model are ~1e-6.
    scale = float(expected.abs().max())
    assert (expected != 0).float().mean() > 0.5
    torch.testing.assert_close(got, expected, atol=1e-5 * scale, rtol=1e-4)


@CONFIGS
def test_lora_unmerged_equals_merged_model(config):
    lora = _lora(UNMERGED_TARGETS)
    _assert_same_attributions(lora, _merged_copy(lora), config)


@CONFIGS
def test_lora_merged_in_place_equals_merged_model(config):
    lora = _merged_in_place(ALL_TARGETS)
    _assert_same_attributions(lora, _merged_copy(lora), config)


@pytest.mark.parametrize("method", ["LogAt", "GlobEnc-N_enc"])
def test_lora_changes_the_attributions(method):
    # The checks above could not fail if the adapters (or the retrained
    # classifier) had no effect on the attributions.
    lora = _lora(UNMERGED_TARGETS)
    plain = tiny_classifier("bert")
    config = BY_NAME[method]
    difference = (_attribute(lora, config) - _attribute(plain, config)).abs().max()
    assert difference > 1e-3


def test_globenc_refuses_unmerged_lora_on_the_attention_output():
    with pytest.raises(UnsupportedModelError, match="merge_adapter"):
        _attribute(_lora(ALL_TARGETS), BY_NAME["GlobEnc-N_enc"])


def test_lora_inner_model_is_the_transformers_model():
    lora = _lora(UNMERGED_TARGETS)
    inner = lora.get_base_model()
    # For mypy: peft returns the model it wraps, the tiny BERT classifier.
    assert isinstance(inner, transformers.BertForSequenceClassification)
    adapter = get_adapter(lora)
    assert adapter.model is inner
    assert adapter.word_embeddings() is inner.get_input_embeddings()
    # the LoRA-wrapped value projection is the module GlobEnc hooks
    assert (
        adapter.block_parts(1).value is inner.bert.encoder.layer[0].attention.self.value
    )


@CONFIGS
def test_torch_compile_equals_uncompiled(config):
    model = tiny_classifier("bert")
    compiled = _compiled(model)
    assert get_adapter(compiled).model is model
    _assert_same_attributions(compiled, model, config)


@CONFIGS
def test_data_parallel_equals_inner_model(config):
    model = tiny_classifier("bert")
    _assert_same_attributions(nn.DataParallel(model), model, config)


def test_nested_wrappers_are_seen_through():
    lora = _lora(UNMERGED_TARGETS)
    compiled = _compiled(lora)
    assert unwrap_model(compiled) is lora.get_base_model()
    plain = tiny_classifier("bert")
    assert unwrap_model(plain) is plain


class _Holder(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.net = model


def test_unknown_wrapper_names_the_inner_model():
    with pytest.raises(UnsupportedModelError, match=r"_Holder.*model\.net"):
        get_adapter(_Holder(tiny_classifier("bert")))


def test_prompt_learning_is_refused():
    config = peft.PromptTuningConfig(
        task_type=peft.TaskType.SEQ_CLS, num_virtual_tokens=2
    )
    model = peft.get_peft_model(tiny_classifier("bert"), config)
    with pytest.raises(UnsupportedModelError, match="prompt learning"):
        get_adapter(model)
