#!/usr/bin/env python3
r"""Models placed by accelerate (:mod:`captum_ext.adapters.placement`): every
method, :class:`LLMTokenAttribution` and the generation metrics give the plain
model's numbers on a model dispatched with a ``device_map`` that splits it
between CPU memory and disk offload, and on one ``cpu_offload``-ed (every
parameter on ``meta`` outside its module's forward pass), and leave the
offloaded weights where accelerate keeps them."""

import copy
from types import SimpleNamespace
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

import pytest
import torch
import transformers
from captum.attr import LayerIntegratedGradients
from captum_ext import causal_lm_forward, UnsupportedModelError
from captum_ext.adapters import execution_device, get_adapter, read_parameter
from captum_ext.attr import (
    AttCAT,
    CAT,
    DecodedLayerAttribution,
    DecodedLayerGradCam,
    GlobEnc,
    LLMTokenAttribution,
    LogAt,
    NormXLogit,
)
from captum_ext.evaluation.explain_generation import explain_generation
from captum_ext.metrics import (
    generation_aopc,
    generation_log_odds,
    generation_soft_nc,
    generation_soft_ns,
    generation_sufficiency,
    TokenOptions,
)
from torch import nn, Tensor

from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.attr.method_configs import config_family_pairs, MethodConfig
from tests.helpers import (
    assert_same_state,
    CAUSAL_FAMILIES,
    continuation_batch,
    model_state,
    PAD_ID,
    tiny_causal_lm,
    tiny_classifier,
    token_batch,
)

accelerate = pytest.importorskip("accelerate")  # setup.cfg [test]
# accelerate places a model in place and returns it: the placed model is the
# caller's (a LlamaForCausalLM stays one).
M = TypeVar("M", bound=nn.Module)


def _disk_split(model: M, tmp_path: Any) -> M:
    r"""``infer_auto_device_map`` with CPU memory for 60 % of the weights: the
    embeddings and the first layers on "cpu", the rest offloaded to disk."""
    total = accelerate.utils.compute_module_sizes(model)[""]
    device_map = accelerate.infer_auto_device_map(
        model, max_memory={"cpu": int(0.6 * total), "disk": 10 * total}
    )
    assert set(device_map.values()) == {"cpu", "disk"}
    return accelerate.dispatch_model(
        model, device_map=device_map, offload_dir=str(tmp_path)
    )


def _cpu_offload(model: M, tmp_path: Any) -> M:
    return accelerate.cpu_offload(model, execution_device=torch.device("cpu"))


def _gpu_split(model: M, tmp_path: Any) -> M:
    r"""Half the weights on the first GPU (the embeddings and first layers),
    the rest in CPU memory, as ``device_map="auto"`` does on a small GPU."""
    total = accelerate.utils.compute_module_sizes(model)[""]
    device_map = accelerate.infer_auto_device_map(
        model, max_memory={0: int(0.5 * total), "cpu": 10 * total}
    )
    assert set(device_map.values()) == {0, "cpu"}
    return accelerate.dispatch_model(model, device_map=device_map)


def _gpu_offload(model: M, tmp_path: Any) -> M:
    return accelerate.cpu_offload(model, execution_device=torch.device("cuda", 0))


_ON_GPU = (_gpu_split, _gpu_offload)
_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
PLACEMENTS = pytest.mark.parametrize(
    "place",
    [
        _disk_split,
        _cpu_offload,
        pytest.param(_gpu_split, marks=_GPU),
        pytest.param(_gpu_offload, marks=_GPU),
    ],
    ids=["disk_split", "cpu_offload", "gpu_split", "gpu_offload"],
)


def _placed(model: M, place: Callable[[M, Any], M], tmp_path: Any) -> M:
    placed = place(copy.deepcopy(model), tmp_path)
    # offloaded or moved for real
    assert any(p.is_meta or p.device.type != "cpu" for p in placed.parameters())
    return placed


def _tolerance(place: Callable) -> Tuple[Optional[float], Optional[float]]:
    r"""``(rtol, atol)``: a GPU sums in another order than the CPU (float32
    round-off); None: ``assert_close``'s defaults."""
    return (1e-4, 1e-5) if place in _ON_GPU else (None, None)


def _meta_names(model: nn.Module) -> set:
    return {name for name, p in model.named_parameters() if p.is_meta}


def _same_on_placed(
    model: nn.Module, place: Callable, tmp_path: Any, run: Callable[[nn.Module], Any]
) -> None:
    r"""``run`` gives the same numbers on the placed copy of ``model`` (NaN where
    they are NaN: the metrics' padded target steps) and leaves its state and its
    offloaded (``meta``) parameters as they were."""
    expected = run(model)
    assert bool(expected.isfinite().any())
    placed = _placed(model, place, tmp_path)
    before, offloaded = model_state(placed), _meta_names(placed)
    rtol, atol = _tolerance(place)
    torch.testing.assert_close(
        run(placed).cpu(), expected, equal_nan=True, rtol=rtol, atol=atol
    )
    assert_same_state(before, model_state(placed))
    assert _meta_names(placed) == offloaded


@PLACEMENTS
@pytest.mark.parametrize(
    "config, family", config_family_pairs(lambda c, family: family == "bert")
)
def test_classifier_methods(
    config: MethodConfig, family: str, place: Callable, tmp_path: Any
) -> None:
    batch = token_batch()

    def run(model: nn.Module) -> Tensor:
        return config.factory(model)(
            batch["input_ids"], batch["attention_mask"], torch.tensor([0, 1, 2])
        )

    _same_on_placed(tiny_classifier(family), place, tmp_path, run)


# Every method on causal LMs; decoded scores signed (relu=None), as elsewhere.
GENERATION_METHODS: Dict[str, Callable[[nn.Module], Any]] = {
    "LogAt": LogAt,
    "NormXLogit": NormXLogit,
    "CAT": CAT,
    "AttCAT": AttCAT,
    "GlobEnc": GlobEnc,
    "DecodedLayerGradCam": lambda m: DecodedLayerGradCam(m, 1),
    "DecodedLayerAttribution": lambda m: DecodedLayerAttribution(
        m, 1, method=LayerIntegratedGradients
    ),
}
_OPTIONS: Dict[str, Dict[str, Optional[int]]] = {
    "DecodedLayerGradCam": {"relu": None},
    "DecodedLayerAttribution": {"relu": None, "n_steps": 4},
}


@PLACEMENTS
@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
@pytest.mark.parametrize("name", GENERATION_METHODS)
def test_causal_lm_methods(name: str, family: str, place: Callable, tmp_path: Any):
    batch = continuation_batch()

    def run(model: nn.Module) -> Tensor:
        return GENERATION_METHODS[name](model).attribute(
            batch["input_ids"],
            target=batch["target"],
            additional_forward_args=(batch["attention_mask"],),
            **_OPTIONS.get(name, {}),
        )

    _same_on_placed(tiny_causal_lm(family), place, tmp_path, run)


@PLACEMENTS
@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
@pytest.mark.parametrize("target", ["it was big", None])
def test_llm_token_attribution(family, target, place, tmp_path) -> None:
    r"""Given or generated targets: the ids go to the embeddings' execution
    device (never ``meta``), and ``generate`` runs through the hooks."""
    tokenizer = tiny_lm_tokenizer()

    def run(model: nn.Module) -> Tensor:
        result = LLMTokenAttribution(AttCAT(model), tokenizer).attribute(
            "the cat sat on a mat",
            target=target,
            gen_args=None if target else {"max_new_tokens": 4},
        )
        return result.token_attr

    _same_on_placed(tiny_causal_lm(family), place, tmp_path, run)


BOS = 1  # the tiny causal LMs' bos_token_id
GENERATION_METRICS = (
    generation_aopc,
    generation_sufficiency,
    generation_log_odds,
    generation_soft_nc,
    generation_soft_ns,
)


@PLACEMENTS
@pytest.mark.parametrize("metric", GENERATION_METRICS, ids=lambda m: m.__name__)
def test_generation_metrics(metric: Callable, place: Callable, tmp_path) -> None:
    batch = continuation_batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    ids[torch.arange(len(ids)), mask.argmax(1)] = BOS  # never removed
    scores = torch.randn(*batch["target"].shape, ids.shape[1])

    def run(model: nn.Module) -> Tensor:
        result = metric(
            causal_lm_forward(model),
            ids,
            scores,
            batch["target"],
            (mask,),
            tokens=TokenOptions(pad_token_id=PAD_ID, special_token_ids=[BOS]),
        )
        return torch.cat([result.score, result.curve.flatten(1)], 1)

    _same_on_placed(tiny_causal_lm("llama"), place, tmp_path, run)


@PLACEMENTS
def test_input_device_is_the_embeddings_execution_device(place, tmp_path) -> None:
    placed = _placed(tiny_causal_lm("gpt2"), place, tmp_path)
    on_gpu = place in _ON_GPU
    expected = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    assert get_adapter(placed).input_device() == expected
    # A GPU index, as accelerate's device maps give it (no GPU needed to ask).
    embeddings = nn.Embedding(3, 2)
    setattr(embeddings, "_hf_hook", SimpleNamespace(execution_device=1))
    assert execution_device(embeddings) == torch.device("cuda", 1)


def test_read_parameter_loads_offloaded_weights(tmp_path) -> None:
    model = tiny_causal_lm("llama")
    # For mypy: the family fixes the class, and so .model.norm.
    assert isinstance(model, transformers.LlamaForCausalLM)
    placed = _placed(model, _cpu_offload, tmp_path)
    norm, placed_norm = model.model.norm, placed.model.norm
    assert placed_norm.weight.is_meta
    loaded = read_parameter(placed_norm, "weight")
    assert loaded is not None and torch.equal(loaded, norm.weight)
    assert placed_norm.weight.is_meta  # put back where accelerate keeps it
    assert read_parameter(placed_norm, "bias") is None


def test_meta_weight_without_hook_is_an_error() -> None:
    with torch.device("meta"):
        norm = nn.LayerNorm(4)
    with pytest.raises(UnsupportedModelError, match="meta device"):
        read_parameter(norm, "weight")


def test_explain_generation_on_an_offloaded_model(tmp_path) -> None:
    model, tokenizer = tiny_causal_lm("llama"), tiny_lm_tokenizer()

    def run(model: nn.Module) -> Tensor:
        explanation = explain_generation(
            model, tokenizer, "the cat sat . on a mat", ["AttCAT"], sources="sentences"
        )
        return explanation.scores["AttCAT"]

    _same_on_placed(model, _cpu_offload, tmp_path, run)
