#!/usr/bin/env python3
r"""Tiny random-init models of every supported family, built from configs in code
(no files, well under a second each), and small token batches for them."""

import json
import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
)

import pytest
import torch
import transformers
from captum_ext.evaluation.user_data import LoadedExamples
from torch import nn, Tensor

VOCAB = 99
PAD_ID = 0
CLS_ID = 2
SEP_ID = 3
FIRST_CONTENT_ID = 5

# The sizes every family shares, in transformers' common names: DistilBERT's and
# GPT-2's configs take them through their attribute_map (hidden_size -> dim or
# n_embd, num_hidden_layers -> n_layers or n_layer, ...).
_SIZES: Dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
)
_SPECIALS: Dict[str, Any] = dict(
    pad_token_id=PAD_ID, cls_token_id=CLS_ID, sep_token_id=SEP_ID
)
_CAUSAL_SPECIALS: Dict[str, Any] = dict(bos_token_id=1, eos_token_id=1)
# Each family's config class and its own options: a feed-forward width of 37
# (DistilBERT's hidden_dim; GPT-2 keeps 4 x hidden_size), factorised embeddings
# for ELECTRA and ALBERT, grouped key/value heads for Llama. RoBERTa offsets
# positions by pad_token_id + 1.
_FAMILY_CONFIGS: Dict[
    str, Tuple[Type[transformers.PretrainedConfig], Dict[str, Any]]
] = {
    "bert": (transformers.BertConfig, dict(intermediate_size=37)),
    "roberta": (transformers.RobertaConfig, dict(intermediate_size=37)),
    "electra": (
        transformers.ElectraConfig,
        dict(intermediate_size=37, embedding_size=16),
    ),
    "albert": (
        transformers.AlbertConfig,
        dict(intermediate_size=37, embedding_size=16),
    ),
    "deberta-v2": (transformers.DebertaV2Config, dict(intermediate_size=37)),
    "distilbert": (transformers.DistilBertConfig, dict(hidden_dim=37)),
    "gpt2": (transformers.GPT2Config, _CAUSAL_SPECIALS),
    "llama": (
        transformers.LlamaConfig,
        dict(intermediate_size=37, num_key_value_heads=2, **_CAUSAL_SPECIALS),
    ),
}
# Llama-style families that share Llama's module names (causal-LM adapter tests).
_LLAMA_STYLE = dict(
    intermediate_size=37, num_key_value_heads=2, head_dim=8, **_CAUSAL_SPECIALS
)
_FAMILY_CONFIGS.update(
    mistral=(transformers.MistralConfig, _LLAMA_STYLE),
    qwen2=(transformers.Qwen2Config, _LLAMA_STYLE),
    qwen3=(transformers.Qwen3Config, _LLAMA_STYLE),
    gemma=(transformers.GemmaConfig, _LLAMA_STYLE),
)

ENCODER_FAMILIES = ("bert", "roberta", "electra", "distilbert", "albert", "deberta-v2")
CAUSAL_FAMILIES = ("gpt2", "llama")
ALL_FAMILIES = ENCODER_FAMILIES + CAUSAL_FAMILIES
# Every causal-LM family of the adapters (the method tests run on CAUSAL_FAMILIES).
CAUSAL_LM_FAMILIES = CAUSAL_FAMILIES + ("mistral", "qwen2", "qwen3", "gemma")
# Post-LayerNorm encoders with separate value/output projections (GlobEnc).
POST_LN_FAMILIES = ("bert", "roberta", "electra", "distilbert")


def _config(family: str, num_labels: int) -> transformers.PretrainedConfig:
    config_class, options = _FAMILY_CONFIGS[family]
    kwargs: Dict[str, Any] = dict(num_labels=num_labels, **_SIZES, **_SPECIALS)
    return config_class(**kwargs, **options)


def tiny_classifier(
    family: str,
    num_labels: int = 3,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "eager",
) -> transformers.PreTrainedModel:
    r"""A random-init ``*ForSequenceClassification`` model in eval mode."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_config(
        _config(family, num_labels), attn_implementation=attn_implementation
    )
    return model.to(dtype).eval()


def tiny_masked_lm(family: str, seed: int = 0) -> transformers.PreTrainedModel:
    r"""A random-init ``*ForMaskedLM`` model in eval mode."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForMaskedLM.from_config(
        _config(family, 2), attn_implementation="eager"
    )
    return model.eval()


def tiny_causal_lm(
    family: str,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "eager",
) -> transformers.PreTrainedModel:
    r"""A random-init ``*ForCausalLM`` model (``family`` in :data:`CAUSAL_FAMILIES`)
    in eval mode."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(
        _config(family, 2), attn_implementation=attn_implementation
    )
    return model.to(dtype).eval()


def tiny_recall_generator(
    seed: int = 0, task: Any = None
) -> Tuple[transformers.PreTrainedModel, Any]:
    r"""A random-init tiny Llama over ``task``'s vocabulary (default: the
    key-value recall task's) and its tokenizer: the default generator's
    interface, untrained, with positions for the long recall prompts."""
    from captum_ext.defaults.recall import recall_tokenizer, RecallTask

    tokenizer = recall_tokenizer(task or RecallTask())
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        **dict(_SIZES, vocab_size=len(tokenizer), max_position_embeddings=2048),
        intermediate_size=37,
        num_key_value_heads=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager"
    )
    return model.eval(), tokenizer


def continuation_batch(
    prompt_lengths: Tuple[int, ...] = (5, 3, 7),
    target_lengths: Tuple[int, ...] = (3, 1, 2),
    seed: int = 0,
) -> Dict[str, Tensor]:
    r"""Left-padded random prompts (``input_ids``, ``attention_mask``) and their
    continuations ``target`` ``[batch, T]``, right-padded with -100."""
    prompts = token_batch(prompt_lengths, pad_side="left", seed=seed, causal=True)
    generator = torch.Generator().manual_seed(seed + 1)
    target = torch.full((len(target_lengths), max(target_lengths)), -100)
    for row, length in enumerate(target_lengths):
        target[row, :length] = torch.randint(
            FIRST_CONTENT_ID, VOCAB, (length,), generator=generator
        )
    return dict(prompts, target=target)


def token_batch(
    lengths: Tuple[int, ...] = (7, 4, 9),
    pad_side: str = "right",
    seed: int = 0,
    causal: bool = False,
) -> Dict[str, Tensor]:
    r"""Random content tokens framed like the family's tokenizer would frame them.

    Encoders get ``[CLS] ... [SEP]``; causal models get plain content. Lengths count
    every real token; shorter rows are padded with ``PAD_ID`` on ``pad_side``.
    """
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        tokens = torch.randint(FIRST_CONTENT_ID, VOCAB, (length,), generator=generator)
        if not causal:
            tokens[0], tokens[-1] = CLS_ID, SEP_ID
        start = 0 if pad_side == "right" else width - length
        input_ids[row, start : start + length] = tokens
        attention_mask[row, start : start + length] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def first_norms(model: transformers.PreTrainedModel) -> List[nn.Module]:
    r"""Each pre-LN block's first norm, whose output its attention reads, by the
    Hugging Face names (GPT-2: ``ln_1``; the Llama-style families:
    ``input_layernorm``), written here independently of the adapter."""
    gpt2 = model.config.model_type == "gpt2"
    path = "transformer.h.{}.ln_1" if gpt2 else "model.layers.{}.input_layernorm"
    layers = range(model.config.num_hidden_layers)
    return [model.get_submodule(path.format(layer)) for layer in layers]


@contextmanager
def outputs_of(modules: Sequence[nn.Module]) -> Iterator[List[Tensor]]:
    r"""The outputs of ``modules``, in call order, while the block runs."""
    outputs: List[Tensor] = []
    handles = [
        module.register_forward_hook(lambda _m, _i, out: outputs.append(out))
        for module in modules
    ]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


def is_causal(family: str) -> bool:
    return family in CAUSAL_FAMILIES


def _method_hooks(hooks: Mapping[int, object]) -> int:
    r"""Forward hooks not installed by transformers itself: transformers >= 5 adds
    inactive ``output_capturing_hook``s once per model, the first time hidden states
    or attentions are requested."""
    return sum(
        getattr(h, "__name__", "") != "output_capturing_hook" for h in hooks.values()
    )


def model_state(model: nn.Module) -> Dict[str, object]:
    r"""Everything a method must leave untouched: modes, grad flags, grads, hooks."""
    return {
        "training": [m.training for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "grads": [
            None if p.grad is None else p.grad.clone() for p in model.parameters()
        ],
        "hooks": [
            (
                _method_hooks(m._forward_hooks),
                len(m._forward_pre_hooks),
                len(m._backward_hooks),
                len(getattr(m, "_backward_pre_hooks", {})),
            )
            for m in model.modules()
        ],
    }


def assert_same_state(before: Dict[str, object], after: Dict[str, object]) -> None:
    assert before["training"] == after["training"]
    assert before["requires_grad"] == after["requires_grad"]
    assert before["hooks"] == after["hooks"]
    for g0, g1 in zip(before["grads"], after["grads"]):  # type: ignore[call-overload]
        assert (g0 is None) == (g1 is None)
        if g0 is not None:
            assert torch.equal(g0, g1)


# ----------------------------------------------------------------------------
# Attention read from the query and key (sdpa) against the eager maps.
def sdpa_and_eager(family: str, causal_lm: bool) -> Tuple[nn.Module, nn.Module]:
    r"""The same float64 tiny model loaded with ``sdpa`` and with ``eager``."""
    build = tiny_causal_lm if causal_lm else tiny_classifier
    return (
        build(family, dtype=torch.float64, attn_implementation="sdpa"),
        build(family, dtype=torch.float64, attn_implementation="eager"),
    )


def sliding_window_lm(implementation: str) -> nn.Module:
    r"""A float64 tiny Mistral whose attention sees the last 3 positions."""
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=3,
        pad_token_id=PAD_ID,
    )
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=implementation
    )
    return model.double().eval()


def eager_one_at_a_time(
    scores: Callable[[Dict[str, Tensor]], Tensor], batch: Dict[str, Tensor]
) -> Tensor:
    r"""The reference: each example alone, unpadded (Llama-style eager attention
    gives NaN on left-padded rows in float64), placed at its real positions of
    the padded batch's result (``scores(one_example_batch)``); columns after
    the prompt's (``attribute_generated``) go after the padded prompt."""
    rows = []
    for index, real in enumerate(batch["attention_mask"].bool()):
        one = {"input_ids": batch["input_ids"][index, real][None]}
        one["attention_mask"] = torch.ones_like(one["input_ids"])
        if "target" in batch:
            steps = batch["target"][index] != -100
            one["target"] = batch["target"][index, steps][None]
        alone = scores(one)[0]
        generated = alone.shape[-1] - int(real.sum())
        width = len(real) + (batch["target"].shape[1] if generated else 0)
        row = alone.new_zeros(*alone.shape[:-1], width)
        after = len(real) + torch.arange(generated)
        row[..., torch.cat([real.nonzero()[:, 0], after])] = alone
        if "target" in batch:
            row = torch.cat([row, row.new_zeros(len(steps) - len(row), *row.shape[1:])])
        rows.append(row)
    return torch.stack(rows)


# ----------------------------------------------------------------------------
# Models that are not plain *ForSequenceClassification (adapters' checks).
def assert_same_in_threads(runs: Sequence[Callable[[], Tensor]]) -> None:
    r"""Each of ``runs`` repeated three times in a thread of its own, all
    threads at once, gives exactly the result it gives alone."""
    alone = [run() for run in runs]
    results: Dict[int, Tensor] = {}

    def repeat(index: int) -> None:
        for _ in range(3):
            results[index] = runs[index]()

    threads = [threading.Thread(target=repeat, args=(i,)) for i in range(len(runs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index, expected in enumerate(alone):
        torch.testing.assert_close(results[index], expected, rtol=0, atol=0)


def tiny_base_model(family: str, seed: int = 0) -> transformers.PreTrainedModel:
    r"""A random-init bare ``*Model`` (no head at all) in eval mode: the body of
    :func:`tiny_classifier`."""
    base = tiny_classifier(family, seed=seed).base_model
    assert isinstance(base, transformers.PreTrainedModel)
    return base


class MeanPoolBertClassifier(transformers.BertForSequenceClassification):
    r"""A BERT classifier whose head reads the mean of the attended positions
    instead of [CLS]: the adapter's standard head does not reproduce its logits."""

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        kwargs.pop("labels", None)
        output = self.bert(input_ids, attention_mask=attention_mask, **kwargs)
        hidden = output.last_hidden_state  # [batch, pos, d]
        weights = attention_mask[..., None].to(hidden.dtype)  # [batch, pos, 1]
        pooled = (hidden * weights).sum(1) / weights.sum(1)  # [batch, d]
        logits = self.classifier(pooled)  # [batch, C]
        return transformers.modeling_outputs.SequenceClassifierOutput(
            logits=logits,
            hidden_states=output.hidden_states,
            attentions=output.attentions,
        )


def tiny_mean_pool_classifier(seed: int = 0) -> transformers.PreTrainedModel:
    r"""A random-init :class:`MeanPoolBertClassifier` in eval mode."""
    torch.manual_seed(seed)
    config = _config("bert", 3)
    assert isinstance(config, transformers.BertConfig)
    config._attn_implementation = "eager"
    return MeanPoolBertClassifier(config).eval()


# ------------------------------------------------- tiny tokenizer and model dir
# (shared by tests/evaluation, tests/test_cli.py and tests/test_explain.py)
TINY_WORDS = (
    "the a movie film good bad great awful not very fun boring plot acting it was "
    "is and love hate script < > & ! ."
).split()
TINY_TEXTS = [
    "the movie was great fun !",
    "a boring plot and bad acting .",
    "not very good",
    "i love it",
    "awful film , hate it",
    "the acting is very good and the plot is fun",
]
TINY_LABEL_NAMES = ["negative", "positive", "<mixed>"]


def tiny_tokenizer() -> transformers.PreTrainedTokenizerBase:
    r"""A WordPiece tokenizer whose ids match this module's (PAD 0, UNK 1, CLS 2,
    SEP 3, MASK 4) and the tiny models' vocabulary size."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + TINY_WORDS
    vocab += [f"w{i}" for i in range(VOCAB - len(vocab))]
    # transformers' type information lacks its runtime alias BertTokenizerFast.
    tokenizer = transformers.BertTokenizerFast(  # type: ignore[attr-defined]
        vocab={word: i for i, word in enumerate(vocab)}
    )
    assert (tokenizer.pad_token_id, tokenizer.cls_token_id) == (PAD_ID, CLS_ID)
    assert tokenizer.sep_token_id == SEP_ID
    return tokenizer


def tiny_labelled_bert(num_labels: int = 3) -> transformers.PreTrainedModel:
    r"""A tiny random BERT classifier with named classes."""
    model = tiny_classifier("bert", num_labels=num_labels)
    model.config.id2label = dict(enumerate(TINY_LABEL_NAMES[:num_labels]))
    model.config.label2id = {name: i for i, name in model.config.id2label.items()}
    return model


def save_tiny_model(directory: Path) -> Path:
    r"""A local model directory as ``save_pretrained`` writes it."""
    tiny_labelled_bert().save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    return directory


def save_tiny_chat_lm(directory: Path) -> Path:
    r"""A local causal-LM directory as ``save_pretrained`` writes it: a tiny
    random Qwen2 (Llama-style) with a word-level tokenizer that has a chat
    template."""
    from tests.attr.llm_fixtures import tiny_lm_tokenizer

    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        **_SIZES, intermediate_size=37, num_key_value_heads=2, **_CAUSAL_SPECIALS
    )
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager"
    )
    model.save_pretrained(directory)
    tiny_lm_tokenizer().save_pretrained(directory)
    return directory


def embedding_decoders(
    model: transformers.PreTrainedModel,
    tokenizer: object,
    texts: Optional[Sequence[str]] = None,
) -> list:
    r"""Stands in for the fitted decoders, which would be fitted on real text
    and cached: the tied input embeddings decode every layer."""
    from captum_ext.attr import EmbeddingDecoder

    return [EmbeddingDecoder(model)] * (model.config.num_hidden_layers + 1)


@contextmanager
def embedding_decoders_in_registry() -> Iterator[None]:
    r"""Within the block the registry's ``decoders_for`` is
    :func:`embedding_decoders`: nothing is fitted on real text or read from the
    cache (the ``no_decoder_fitting`` fixture of ``tests/conftest.py``)."""
    from captum_ext.evaluation import registry

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry.methods, "decoders_for", embedding_decoders)
        yield


def tiny_data(n: int = 4, labels: bool = True, pairs: bool = False) -> LoadedExamples:
    r"""The first ``n`` tiny texts as
    :class:`~captum_ext.evaluation.user_data.LoadedExamples` (labels cycling over
    the three classes; pairs: the texts reversed)."""
    texts = list(TINY_TEXTS[:n])
    return LoadedExamples(
        "tiny",
        texts,
        text_pairs=list(reversed(texts)) if pairs else None,
        labels=[i % 3 for i in range(n)] if labels else None,
        label_names=list(TINY_LABEL_NAMES),
    )


# ------------------------------------------------------------- pip without network
def offline_pip_error(
    monkeypatch: "pytest.MonkeyPatch",
    module: object,
    fetch: Callable[[], object],
    failing_run: Callable[..., object],
) -> str:
    r"""The message of the RuntimeError that ``fetch()`` raises when ``module``
    runs pip through ``failing_run`` (standing in for ``subprocess.run``), as it
    fails without network (shared by tests/defaults/test_data.py and
    tests/defaults/test_models.py)."""
    monkeypatch.setattr(module.subprocess, "run", failing_run)  # type: ignore
    with pytest.raises(RuntimeError) as error:
        fetch()
    return str(error.value)


def hub_model_cache(
    home: Path,
    repo_id: str,
    commit: str,
    save: Callable[[Path], Path] = save_tiny_model,
) -> Path:
    r"""``repo_id`` as ``huggingface_hub`` caches it under ``HF_HOME``
    ``home`` (refs/main holds the commit, snapshots/<commit>/ the files
    ``save`` writes: :func:`save_tiny_model` by default); returns the snapshot
    directory."""
    repo = home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = save(repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def hub_dataset_cache(
    home: Path, repo_id: str, splits: Dict[str, Any], scratch: Path
) -> None:
    r"""``repo_id`` as ``datasets`` caches a prepared Hub dataset under
    ``HF_HOME`` ``home`` (``<namespace>___<name>/default/0.0.0/<hash>/``: Arrow
    files and dataset_info.json), which it reads offline. (The Hub's file
    cache alone is not enough: offline, ``datasets`` reads prepared datasets
    only.)"""
    from datasets.packaged_modules.parquet.parquet import Parquet

    scratch.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, frame in splits.items():
        files[split] = str(scratch / f"{split}.parquet")
        frame.to_parquet(files[split])
    name = repo_id.split("/")[-1]
    builder = Parquet(
        cache_dir=str(scratch / "build"),
        dataset_name=name,
        config_name="default",
        data_files=files,
    )
    builder.download_and_prepare()
    folder = repo_id.replace("/", "___")
    commit = "0" * 40
    target = home / "datasets" / folder / "default" / "0.0.0" / commit
    shutil.copytree(builder.cache_dir, target)


def one_line_error(capsys: Any, code: object, expected: str) -> str:
    r"""Asserts that a CLI call failed with exit code 2 and one line on stderr,
    no traceback, holding ``expected``; returns that line."""
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert expected in lines[0], err
    return lines[0]


def dump_rank_zero_result(
    result: Any, examples: Sequence[Any], tokens: str, path: str
) -> None:
    r"""What a torchrun benchmark script writes for the one-process vs
    two-ranks comparison (rank 0 only): the rows with their per-example values,
    and each highlighted example's ``tokens`` attribute and AttCAT scores."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    record = {
        "world": result.config["world_size"],
        "rows": [
            [r.method, r.n, r.rows, r.metrics, r.per_example, len(r.ratios)]
            for r in result.rows
        ],
        "examples": [getattr(e, tokens) for e in examples],
        "scores": [e.scores["AttCAT"].tolist() for e in examples],
    }
    with open(path, "w") as handle:
        json.dump(record, handle)


_VISION_CONFIGS = {"vit": transformers.ViTConfig, "deit": transformers.DeiTConfig}
_VISION_CLASSES = {
    "vit": transformers.ViTForImageClassification,
    "deit": transformers.DeiTForImageClassification,
}


def tiny_vision(family: str, attention: str = "eager", image_size: int = 8) -> Any:
    r"""A float64 random-init image classifier: ``image_size`` square images
    (8 x 8 by default), 4 x 4 patches."""
    torch.manual_seed(0)
    options: Dict[str, Any] = dict(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        image_size=image_size,
        patch_size=4,
        num_channels=3,
        num_labels=4,
        attn_implementation=attention,
    )
    config = _VISION_CONFIGS[family](**options)
    return _VISION_CLASSES[family](config).double().eval()
