#!/usr/bin/env python3
r"""GlobEnc on pre-LayerNorm causal LMs: the decomposition against the model's
own parts at every layer, and the generative contract (shapes, padding, chunks,
teacher-forcing consistency, refusals)."""

from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
import transformers
from captum_ext import get_adapter, UnsupportedModelError
from captum_ext._utils.hooks import HookSet
from captum_ext._utils.teacher_forcing import IGNORE_INDEX, teacher_forced_batch
from captum_ext._utils.token_batch import parse_token_batch, TokenBatch
from captum_ext.adapters import ModelAdapter, NormParams, PreNormParts
from captum_ext.adapters.families import _FAMILIES
from captum_ext.attr import GlobEnc
from captum_ext.attr._utils.decoder_decomposition import (
    capture_decoder,
    decoder_factors,
    DecoderLayer,
    next_norms,
)
from torch import nn, Tensor
from transformers import PreTrainedModel
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

from tests.helpers import (
    assert_same_state,
    CAUSAL_FAMILIES,
    CAUSAL_LM_FAMILIES,
    continuation_batch,
    model_state,
    tiny_causal_lm,
    tiny_classifier,
    token_batch,
    VOCAB,
)

VARIANTS = ("N_enc", "N_res", "N")


def _attribute(
    model: PreTrainedModel, batch: Dict[str, Tensor], **kwargs: Any
) -> Tensor:
    # p_t's own term scored: the tests below read every column of the rows.
    return GlobEnc(model, score_predicting_position=True).attribute(
        batch["input_ids"],
        target=batch["target"],
        additional_forward_args=(batch["attention_mask"],),
        **kwargs,
    )


def _relative_error(got: Tensor, want: Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


def _norm(params: NormParams, x: Tensor) -> Tensor:
    r"""The norm's formula from the adapter's :class:`NormParams`."""
    centre = x.mean(-1, keepdim=True) if params.centred else 0.0
    spread = ((x - centre) ** 2).mean(-1, keepdim=True)
    bias = 0.0 if params.bias is None else params.bias
    return params.weight * (x - centre) / (spread + params.eps).sqrt() + bias


def _real_parts(
    adapter: ModelAdapter, batch: TokenBatch
) -> Tuple[List[PreNormParts], Dict[str, List[Tensor]], List[DecoderLayer]]:
    r"""Every block's real outputs, by hooks on the adapter's parts, and the
    decomposition's inputs from the same forward pass."""
    parts = [adapter.pre_norm_parts(k) for k in range(1, adapter.num_layers + 1)]
    with HookSet() as hooks, torch.no_grad():
        real = {
            "norm1": [hooks.capture_output(p.norm1.module) for p in parts],
            "attention": [hooks.capture_output(p.attention_output) for p in parts],
            "residual": [hooks.capture_input(p.norm2.module) for p in parts],
            "norm2": [hooks.capture_output(p.norm2.module) for p in parts],
            "mlp": [hooks.capture_output(p.mlp) for p in parts],
            "final": [hooks.capture_output(adapter.final_norm().module)],
        }
        _, layers = capture_decoder(adapter, batch)
    return parts, {k: [v[0] for v in vs] for k, vs in real.items()}, layers


def _decomposed_sum(
    layer: DecoderLayer, parts: PreNormParts, norm: NormParams, variant: str
) -> Tensor:
    r"""Sum over source tokens of the decomposed vectors ``[batch, pos, d]``."""
    return decoder_factors(layer, parts, norm, variant).vectors().sum(dim=2)


def _completeness_batch(family: str) -> Dict[str, Tensor]:
    # Llama's eager mask puts NaN on left-padded rows in float64: unpadded there.
    lengths = (6, 4, 7) if family == "gpt2" else (7, 7)
    return token_batch(lengths, pad_side="left", causal=True)


@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
def test_every_part_sums_to_its_real_output_at_every_layer(family: str) -> None:
    model = tiny_causal_lm(family, dtype=torch.float64)
    adapter = get_adapter(model)
    tokens = _completeness_batch(family)
    batch = parse_token_batch(adapter, tokens["input_ids"], (tokens["attention_mask"],))
    parts, real, layers = _real_parts(adapter, batch)
    valid = batch.valid
    norms = next_norms(adapter)
    # What reads block l's output: block l+1's norm1, the final norm after L.
    next_outputs = real["norm1"][1:] + real["final"]
    with torch.no_grad():
        for k, (layer, part, norm) in enumerate(zip(layers, parts, norms)):
            b_out = 0.0 if part.output_bias is None else part.output_bias
            # norm1: the adapter's NormParams reproduce the norm on every token
            # (each value vector reads its own token's norm1 output only).
            got = _norm(part.norm1, layer.hidden)
            assert _relative_error(got[valid], real["norm1"][k][valid]) <= 1e-6
            # Attention: sum_j sum_h A_h[i,j] W_O,h v_h,j + b_O.
            attention = _decomposed_sum(layer, part, norm, "N") + b_out
            want = real["attention"][k]
            assert _relative_error(attention[valid], want[valid]) <= 1e-6
            # Residual: sum_j z_ij + b_O = h' (the real input of norm2).
            residual = _decomposed_sum(layer, part, norm, "N_res") + b_out
            want = real["residual"][k]
            assert _relative_error(residual[valid], want[valid]) <= 1e-6
            # norm2 and the MLP: kept whole; h'' = h' + MLP(norm2(h')).
            got = _norm(part.norm2, real["residual"][k])
            assert _relative_error(got[valid], real["norm2"][k][valid]) <= 1e-6
            block_output = residual + real["mlp"][k]
            assert _relative_error(block_output[valid], layer.output[valid]) <= 1e-6
            # The next norm as a linear map with position i's statistics:
            # sum_j e_ij + N_lin(b_O + MLP_i) + beta = N(h''_i).
            undistributed = decoder_factors(layer, part, norm, "N_enc")
            spread = undistributed.scale[..., None]  # 1 / sqrt(s(h''_i) + eps)
            rest = b_out + real["mlp"][k]
            centre = rest.mean(-1, keepdim=True) if norm.centred else 0.0
            beta = 0.0 if norm.bias is None else norm.bias
            encoded = (
                _decomposed_sum(layer, part, norm, "N_enc")
                + spread * norm.weight * (rest - centre)
                + beta
            )
            want = next_outputs[k]
            assert _relative_error(encoded[valid], want[valid]) <= 1e-6


@pytest.mark.parametrize("family", CAUSAL_LM_FAMILIES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_norms_are_the_norms_of_the_vectors_and_lower_triangular(
    family: str, variant: str
) -> None:
    model = tiny_causal_lm(family, dtype=torch.float64)
    adapter = get_adapter(model)
    tokens = _completeness_batch(family)
    batch = parse_token_batch(adapter, tokens["input_ids"], (tokens["attention_mask"],))
    with torch.no_grad():
        _, layers = capture_decoder(adapter, batch)
        for k, (layer, norm) in enumerate(zip(layers, next_norms(adapter))):
            factors = decoder_factors(
                layer, adapter.pre_norm_parts(k + 1), norm, variant
            )
            norms = factors.norms()
            torch.testing.assert_close(
                norms, factors.vectors().norm(dim=-1), rtol=1e-10, atol=1e-12
            )
            # Causal: j <= i only (a pad row's query is no token's: left out).
            rows = norms.masked_fill(~batch.valid[:, :, None], 0)
            assert bool((rows.triu(1) == 0).all())
    matrices = GlobEnc(model).attribute_matrices(
        tokens["input_ids"],
        additional_forward_args=(tokens["attention_mask"],),
        variant=variant,
    )
    assert matrices.shape == (len(tokens["input_ids"]), 2, 7, 7)
    assert bool((matrices.triu(1) == 0).all())


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
@pytest.mark.parametrize("attribute_generated", (False, True))
def test_shapes_dtype_and_zeros_outside_the_score_mask(
    family: str, attribute_generated: bool
) -> None:
    batch = continuation_batch()
    model = tiny_causal_lm(family)
    scores = _attribute(model, batch, attribute_generated=attribute_generated)
    joined = teacher_forced_batch(
        batch["input_ids"], batch["attention_mask"], batch["target"], 0, VOCAB
    )
    mask = joined.score_mask(attribute_generated)
    assert scores.shape == mask.shape and scores.dtype == torch.float32
    assert bool((scores[~mask] == 0).all())
    assert bool((scores[mask] > 0).all())
    # Unpadded prompts: Llama's eager mask makes left padding NaN in float64.
    unpadded = continuation_batch(prompt_lengths=(4, 4), target_lengths=(3, 2))
    scores64 = _attribute(tiny_causal_lm(family, dtype=torch.float64), unpadded)
    assert scores64.dtype == torch.float64


def _one_prompt(batch: Dict[str, Tensor], row: int) -> Dict[str, Tensor]:
    keep = batch["attention_mask"][row].bool()
    target = batch["target"][row]
    return {
        "input_ids": batch["input_ids"][row, keep][None],
        "attention_mask": batch["attention_mask"][row, keep][None],
        "target": target[target != IGNORE_INDEX][None],
    }


@pytest.mark.parametrize(
    "family, dtype, tolerance",
    [("gpt2", torch.float64, 1e-10), ("llama", torch.float32, 1e-5)],
)
@pytest.mark.parametrize("variant", VARIANTS)
def test_left_padded_batch_equals_one_prompt_at_a_time(
    family: str, dtype: torch.dtype, tolerance: float, variant: str
) -> None:
    batch = continuation_batch()
    model = tiny_causal_lm(family, dtype=dtype)
    options = dict(variant=variant, attribute_generated=True)
    scores = _attribute(model, batch, **options)
    prompt_len = batch["input_ids"].shape[1]
    for row in range(len(batch["input_ids"])):
        single = _one_prompt(batch, row)
        alone = _attribute(model, single, **options)[0]  # [T_r, p_r + T_r]
        p_r, t_r = single["input_ids"].shape[1], single["target"].shape[1]
        columns = list(range(prompt_len - p_r, prompt_len + t_r))
        torch.testing.assert_close(
            scores[row, :t_r, columns], alone, rtol=tolerance, atol=0
        )
        assert bool((scores[row, t_r:] == 0).all())


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_internal_batch_size_equals_the_whole_batch(family: str) -> None:
    batch = continuation_batch()
    model = tiny_causal_lm(family)
    whole = _attribute(model, batch)
    for size in (1, 2):
        torch.testing.assert_close(
            _attribute(model, batch, internal_batch_size=size),
            whole,
            rtol=1e-6,
            atol=0,
        )


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_row_t_equals_globenc_on_the_prompt_and_earlier_targets(
    family: str, variant: str
) -> None:
    r"""The consistency law: row t on the prompt (and on y_<t) is GlobEnc run on
    prompt + y_<t with the single target y_t."""
    batch = _one_prompt(continuation_batch(prompt_lengths=(6,), target_lengths=(4,)), 0)
    model = tiny_causal_lm(family, dtype=torch.float64)
    options = dict(variant=variant, attribute_generated=True)
    scores = _attribute(model, batch, **options)[0]  # [T, P + T]
    prompt, target = batch["input_ids"], batch["target"]
    prompt_len = prompt.shape[1]
    for t in range(target.shape[1]):
        ids = torch.cat([prompt, target[:, :t]], 1)
        step = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "target": target[:, t : t + 1],
        }
        alone = _attribute(model, step, **options)[0, 0]  # [P + t + 1]
        torch.testing.assert_close(
            scores[t, : prompt_len + t], alone[: prompt_len + t], rtol=1e-10, atol=0
        )


def test_target_and_contrast_only_select_rows() -> None:
    r"""Class-agnostic: y_t's own id (never an input: only y_<t are) and the
    foil ids change nothing."""
    batch = continuation_batch()
    model = tiny_causal_lm("gpt2", dtype=torch.float64)
    scores = _attribute(model, batch)
    other = batch["target"].clone()
    last = (other != IGNORE_INDEX).sum(1) - 1
    other[torch.arange(len(other)), last] = 7
    assert torch.equal(_attribute(model, dict(batch, target=other)), scores)
    other[other != IGNORE_INDEX] = 7
    assert torch.equal(_attribute(model, batch, contrast_target=other), scores)
    with pytest.raises(ValueError, match="contrast_target must be foil ids"):
        _attribute(model, batch, contrast_target=other[:, :1])


@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
def test_model_state_is_untouched_also_when_it_raises(family: str) -> None:
    batch = continuation_batch()
    model = tiny_causal_lm(family)
    model.train()
    before = model_state(model)
    with pytest.warns(UserWarning, match="training mode"):
        _attribute(model, batch, internal_batch_size=2)
    assert_same_state(before, model_state(model))
    block = get_adapter(model).hidden_state_module(1)
    block.register_forward_hook(lambda m, i, o: o * 2)  # breaks h'' = h' + MLP
    before = model_state(model)
    with pytest.raises(UnsupportedModelError, match="block 1 is not the sequential"):
        with pytest.warns(UserWarning, match="training mode"):
            _attribute(model, batch)
    assert_same_state(before, model_state(model))


def _parallel_blocks(model: PreTrainedModel) -> PreTrainedModel:
    r"""GPT-2 rewired as a parallel block (GPT-J, GPT-NeoX):
    h'' = h + Attn(ln_1(h)) + MLP(ln_2(h))."""
    blocks = model.get_submodule("transformer.h")
    assert isinstance(blocks, nn.ModuleList)
    for block in blocks:
        assert isinstance(block, GPT2Block)

        def forward(
            hidden: Tensor,
            cache: object = None,
            attention_mask: Optional[Tensor] = None,
            *args: Any,
            _b: GPT2Block = block,
            **kw: Any,
        ) -> Tensor:
            attention, _ = _b.attn(_b.ln_1(hidden), attention_mask=attention_mask)
            return hidden + attention + _b.mlp(_b.ln_2(hidden))

        block.forward = forward
    return model


def test_unsupported_decoders_are_refused_naming_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = continuation_batch()
    with pytest.raises(UnsupportedModelError, match="block 1 is not the sequential"):
        _attribute(_parallel_blocks(tiny_causal_lm("gpt2")), batch)
    model = tiny_causal_lm("gpt2")
    model.get_submodule("transformer.h.0").ln_1 = nn.Identity()
    with pytest.raises(UnsupportedModelError, match="ln_1 is a Identity, not a"):
        GlobEnc(model)
    monkeypatch.setitem(_FAMILIES, "gpt2", replace(_FAMILIES["gpt2"], pre_norm=None))
    with pytest.raises(UnsupportedModelError, match="not a sequential pre-LayerNorm"):
        GlobEnc(tiny_causal_lm("gpt2"))
    neox = transformers.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4
    )
    with pytest.raises(UnsupportedModelError, match="model_type='gpt_neox'"):
        GlobEnc(transformers.AutoModelForCausalLM.from_config(neox))


def test_bad_calls_are_refused() -> None:
    batch = continuation_batch()
    model = tiny_causal_lm("llama")
    with pytest.raises(ValueError, match="pass its token ids as target"):
        # No target on purpose: a causal LM's call must ask for one.
        _attribute(model, dict(batch, target=None))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match='"N_resln".*no counterpart'):
        _attribute(model, batch, variant="N_resln")
    with pytest.raises(UnsupportedModelError, match="not a post-LayerNorm encoder"):
        GlobEnc(tiny_classifier("gpt2"))
    encoder = tiny_classifier("bert")
    tokens = token_batch()
    with pytest.raises(ValueError, match="apply to causal LMs"):
        GlobEnc(encoder).attribute(
            tokens["input_ids"],
            additional_forward_args=(tokens["attention_mask"],),
            attribute_generated=True,
        )


def test_a_refused_model_is_named_by_its_own_type() -> None:
    r"""Mistral shares Llama's family record; the message names Mistral."""
    model = tiny_causal_lm("mistral")
    del model.model.layers[0].input_layernorm
    with pytest.raises(
        UnsupportedModelError, match="mistral block 1 has no 'input_lay"
    ):
        GlobEnc(model)
