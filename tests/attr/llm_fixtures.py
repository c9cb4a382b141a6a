#!/usr/bin/env python3
r"""A tiny word-level tokenizer for the tiny causal LMs of ``tests/helpers.py``,
built in memory: Llama-style (it prepends BOS), with a pad token, an EOS token
and a chat template whose role markers are special tokens."""

from typing import Sequence

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


# Chat templates in the manner of three model families, each writing role names
# as text next to its own special tokens (a content may equal either).
CHAT_STYLES = {
    "llama": (
        ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        "<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
        "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>"
        "\n\n{% endif %}",
    ),
    "chatml": (
        ("<|im_start|>", "<|im_end|>"),
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>"
        "assistant\n{% endif %}",
    ),
    "gemma": (
        ("<start_of_turn>", "<end_of_turn>"),
        "<s>{% for m in messages %}"
        "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
        "{{ '<start_of_turn>' + role + '\\n' + m['content'] | trim + "
        "'<end_of_turn>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}",
    ),
}
# Words that are also role names or pieces of the styles' special tokens.
CHAT_WORDS = "user assistant system model im start end of turn header id a".split()


def tiny_lm_tokenizer(
    bos: bool = True, pad: bool = True
) -> transformers.PreTrainedTokenizerFast:
    r"""Ids: <pad> 0, <s> 1 (BOS, the tiny models' bos id), </s> 2, <unk> 3, the
    role markers, :data:`LM_WORDS`, then fillers up to the models' vocabulary.
    ``bos``: prepend <s> (as Llama's tokenizer does); ``pad``: have a pad token."""
    return _word_tokenizer(ROLE_TOKENS, LM_WORDS, CHAT_TEMPLATE, bos, pad)


def tiny_chat_tokenizer(style: str) -> transformers.PreTrainedTokenizerFast:
    r"""A tokenizer with the chat template and special tokens of ``style``
    (a key of :data:`CHAT_STYLES`), no BOS added (the templates write their
    own), the words of :data:`LM_WORDS` and :data:`CHAT_WORDS`."""
    specials, template = CHAT_STYLES[style]
    words = [w for w in CHAT_WORDS if w not in LM_WORDS] + LM_WORDS
    return _word_tokenizer(specials, words, template, bos=False, pad=True)


def _word_tokenizer(
    chat_specials: Sequence[str],
    lm_words: Sequence[str],
    template: str,
    bos: bool,
    pad: bool,
) -> transformers.PreTrainedTokenizerFast:
    specials = ["<pad>", "<s>", "</s>", "<unk>", *chat_specials]
    words = specials + list(lm_words)
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
        additional_special_tokens=list(chat_specials),
        clean_up_tokenization_spaces=False,  # decode = the words joined by spaces
    )
    tokenizer.chat_template = template
    return tokenizer
