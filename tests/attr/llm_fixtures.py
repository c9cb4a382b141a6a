#!/usr/bin/env python3
r"""A tiny word-level tokenizer for the tiny causal LMs of ``tests/helpers.py``,
built in memory: Llama-style (it prepends BOS), with a pad token, an EOS token
and a chat template whose role markers are special tokens."""

import tokenizers
import transformers

from tests.helpers import VOCAB

LM_WORDS = (
    "the cat dog sat on a mat and ran to house it was big small red blue "
    "what is colour of sky ? . , i you like hello"
).split()
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_lm_tokenizer(
    bos: bool = True, pad: bool = True
) -> transformers.PreTrainedTokenizerFast:
    r"""Ids: <pad> 0, <s> 1 (BOS, the tiny models' bos id), </s> 2, <unk> 3, the
    role markers, :data:`LM_WORDS`, then fillers up to the models' vocabulary.
    ``bos``: prepend <s> (as Llama's tokenizer does); ``pad``: have a pad token."""
    specials = ["<pad>", "<s>", "</s>", "<unk>", *ROLE_TOKENS]
    words = specials + LM_WORDS
    words += [f"w{i}" for i in range(VOCAB - len(words))]
    model = tokenizers.models.WordLevel(
        {word: i for i, word in enumerate(words)}, unk_token="<unk>"
    )
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    if bos:
        backend.post_processor = tokenizers.processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 1)]
        )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>" if pad else None,
        additional_special_tokens=list(ROLE_TOKENS),
        clean_up_tokenization_spaces=False,  # decode = the words joined by spaces
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
