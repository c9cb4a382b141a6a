#!/usr/bin/env python3
from typing import Any, Callable, Dict, Protocol

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from captum.attr import (  # noqa: E402
    FeatureAblation,
    LLMAttribution,
    LLMAttributionResult,
    TextTemplateInput,
    TextTokenInput,
)
from captum_ext.adapters import UnsupportedModelError  # noqa: E402
from captum_ext.attr import (  # noqa: E402
    AttCAT,
    CAT,
    DecodedLayerGradCam,
    GlobEnc,
    LLMTokenAttribution,
    LogAt,
    NormXLogit,
)
from torch import nn, Tensor  # noqa: E402

from tests.attr.contract_method import GradientXEmbedding  # noqa: E402
from tests.attr.llm_fixtures import (  # noqa: E402
    CHAT_STYLES,
    tiny_chat_tokenizer,
    tiny_lm_tokenizer,
)
from tests.helpers import tiny_causal_lm, tiny_classifier  # noqa: E402

PROMPTS = ["the cat sat on a mat", "a dog ran", "what is the colour of sky ?"]
TARGETS = ["it was big", "to the house .", "blue"]


class CausalLMMethod(Protocol):
    r"""What these tests call on a method: scores ``[batch, T, P]``."""

    def attribute(
        self, inputs: Tensor, target: Tensor, additional_forward_args: Any = None
    ) -> Tensor: ...


# The contract's reference method and every captum_ext method on causal LMs.
METHODS: Dict[str, Callable[[nn.Module], CausalLMMethod]] = {
    "GradientXEmbedding": GradientXEmbedding,
    "LogAt": LogAt,
    "NormXLogit": NormXLogit,
    "CAT": CAT,
    "AttCAT": AttCAT,
    "GlobEnc": GlobEnc,
    "DecodedLayerGradCam": lambda model: DecodedLayerGradCam(model, 1),
}


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm("gpt2", dtype=torch.float64)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_lm_tokenizer()


def _user_script(llm_attr, tokenizer, target):
    r"""What a Captum user writes; only the construction of ``llm_attr`` differs."""
    inp = TextTokenInput("the cat sat on a mat", tokenizer, skip_tokens=[1])
    if isinstance(llm_attr, LLMAttribution):
        result = llm_attr.attribute(inp, **target, use_cached_outputs=False)
    else:
        result = llm_attr.attribute(inp, **target)
    for plot in (result.plot_token_attr, result.plot_seq_attr):
        figure, _ = plot()
        plt.close(figure)
    return result


@pytest.mark.parametrize(
    "target", [dict(target="it was big"), dict(gen_args={"max_new_tokens": 4})]
)
@pytest.mark.parametrize("name", METHODS)
def test_drop_in_for_captum_llm_attribution(model, tokenizer, target, name) -> None:
    captum = _user_script(
        LLMAttribution(FeatureAblation(model), tokenizer), tokenizer, target
    )
    ours = _user_script(
        LLMTokenAttribution(METHODS[name](model), tokenizer), tokenizer, target
    )
    for result in (captum, ours):
        assert isinstance(result, LLMAttributionResult)
    assert ours.input_tokens == captum.input_tokens == "the cat sat on a mat".split()
    assert ours.output_tokens == captum.output_tokens
    assert ours.token_attr.shape == captum.token_attr.shape
    assert ours.seq_attr.shape == captum.seq_attr.shape
    torch.testing.assert_close(ours.seq_attr, ours.token_attr.sum(0))


TEMPLATE = "{} sat on {} and {} like the {} . {} was"
VALUES = ["the cat", "a mat", "you", "dog", "it"]


def _captum_tutorial_calls(llm_attr, tokenizer):
    r"""Calls of ``LLMAttribution.attribute``'s documented signature, as a user
    writes them for ``LLMAttribution`` (the tutorial's own cells, baselines
    included, are in test_llm_captum_client_code.py)."""
    target = "big red"
    template = TextTemplateInput(TEMPLATE, values=VALUES)
    yield "template", llm_attr.attribute(template, target=target)
    grouped = TextTemplateInput(TEMPLATE, values=VALUES, mask=[0, 1, 1, 0, 2])
    yield "mask", llm_attr.attribute(grouped, target=target)
    yield "trials", llm_attr.attribute(template, target=target, num_trials=3)
    yield "gen_args", llm_attr.attribute(template, gen_args={"max_new_tokens": 3})
    tokens = TextTokenInput("the cat sat on a mat", tokenizer, skip_tokens=[1])
    yield "tokens", llm_attr.attribute(tokens, target=target)
    # Captum's positional order: inp, target, num_trials, gen_args,
    # use_cached_outputs, _inspect_forward, forward_in_tokens.
    yield "positional", llm_attr.attribute(tokens, target, 1, None, False, None, False)
    yield "uncached", llm_attr.attribute(
        tokens, target=target, use_cached_outputs=False
    )


@pytest.mark.parametrize("name", METHODS)
def test_captums_documented_calls_run_unchanged(model, tokenizer, name) -> None:
    captum = dict(
        _captum_tutorial_calls(
            LLMAttribution(FeatureAblation(model), tokenizer), tokenizer
        )
    )
    ours = dict(
        _captum_tutorial_calls(
            LLMTokenAttribution(METHODS[name](model), tokenizer), tokenizer
        )
    )
    for call, result in ours.items():
        assert result.input_tokens == captum[call].input_tokens, call
        assert result.output_tokens == captum[call].output_tokens, call
        assert result.token_attr.shape == captum[call].token_attr.shape, call
    # Deterministic methods: the mean of three trials is one trial; Captum's
    # switches between decoding schemes change nothing in one teacher-forced pass.
    torch.testing.assert_close(ours["trials"].token_attr, ours["template"].token_attr)
    for call in ("positional", "uncached"):
        torch.testing.assert_close(
            ours[call].token_attr, ours["tokens"].token_attr, rtol=0, atol=0
        )
    # mask [0, 1, 1, 0, 2]: a group scores the sum of its values, on each of them.
    values = ours["template"].token_attr
    groups = [values[:, [0, 3]].sum(1), values[:, [1, 2]].sum(1), values[:, 4]]
    expected = torch.stack([groups[g] for g in (0, 1, 1, 0, 2)], 1)
    torch.testing.assert_close(ours["mask"].token_attr, expected)


def test_inspect_forward_gets_the_unperturbed_pass(model, tokenizer) -> None:
    calls = []
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    llm_attr.attribute(
        PROMPTS[0], target="it was big", _inspect_forward=lambda *a: calls.append(a)
    )
    ids = torch.tensor(tokenizer.encode(PROMPTS[0] + " it was big"))
    with torch.no_grad():
        log_probs = model(ids[None]).logits[0].log_softmax(-1)
    steps = [log_probs[len(ids) - 4 + t, ids[len(ids) - 3 + t]] for t in range(3)]
    expected = torch.stack([sum(steps), *steps]).exp().tolist()
    ((prompt, response, probs),) = calls
    assert (prompt, response) == ("<s> " + PROMPTS[0], "it was big")
    torch.testing.assert_close(torch.tensor(probs), torch.tensor(expected))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (dict(num_trials=0), ValueError, "num_trials must be a positive int"),
        (dict(num_trials=True), TypeError, "num_trials must be a positive int"),
        (dict(num_trials={"max_new_tokens": 2}), TypeError, "pass gen_args=... by"),
        (dict(use_cached_outputs="no"), TypeError, "use_cached_outputs must be"),
        (dict(forward_in_tokens=None), TypeError, "forward_in_tokens must be"),
        (dict(_inspect_forward=3), TypeError, "_inspect_forward must be"),
    ],
)
def test_bad_captum_options(model, tokenizer, call, error, message) -> None:
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    with pytest.raises(error, match=message):
        llm_attr.attribute(PROMPTS[0], target="red", **call)


def _prompt_ids(tokenizer, text):
    ids = torch.tensor(tokenizer.encode(text))[None]
    return ids, torch.ones_like(ids)


@pytest.mark.parametrize("name", METHODS)
def test_rows_are_the_method_on_the_prompt_ids(model, tokenizer, name) -> None:
    method = METHODS[name](model)
    result = LLMTokenAttribution(method, tokenizer).attribute(
        TextTokenInput(PROMPTS[0], tokenizer, skip_tokens=["<s>", "on"]),
        target=TARGETS[0],
    )
    ids, mask = _prompt_ids(tokenizer, PROMPTS[0])
    # The string target carries no BOS: the same ids as add_special_tokens=False.
    target = torch.tensor(tokenizer.encode(TARGETS[0], add_special_tokens=False))
    assert target[0] != tokenizer.bos_token_id
    expected = method.attribute(ids, target=target[None], additional_forward_args=mask)
    kept = [
        i
        for i, t in enumerate(tokenizer.convert_ids_to_tokens(ids[0]))
        if t not in ("<s>", "on")
    ]
    torch.testing.assert_close(result.token_attr, expected[0][:, kept])
    assert result.output_tokens == TARGETS[0].split()


@pytest.mark.parametrize("name", METHODS)
def test_batch_equals_one_prompt_at_a_time(model, tokenizer, name) -> None:
    llm_attr = LLMTokenAttribution(METHODS[name](model), tokenizer)
    for options in (dict(target=TARGETS), dict(gen_args={"max_new_tokens": 3})):
        batch = llm_attr.attribute(PROMPTS, attribute_generated=True, **options)
        for prompt, got, target in zip(PROMPTS, batch, TARGETS):
            single = dict(options, target=target) if "target" in options else options
            alone = llm_attr.attribute(prompt, attribute_generated=True, **single)
            assert got.input_tokens == alone.input_tokens
            assert got.output_tokens == alone.output_tokens
            torch.testing.assert_close(
                got.token_attr, alone.token_attr, rtol=0, atol=1e-12
            )


def test_internal_batch_size_and_no_pad_token(model) -> None:
    with_pad = LLMTokenAttribution(GradientXEmbedding(model), tiny_lm_tokenizer())
    without = LLMTokenAttribution(
        GradientXEmbedding(model), tiny_lm_tokenizer(pad=False)
    )
    expected = with_pad.attribute(PROMPTS, TARGETS)
    for got in (
        without.attribute(PROMPTS, TARGETS),
        with_pad.attribute(PROMPTS, TARGETS, internal_batch_size=1),
    ):
        for a, b in zip(got, expected):
            torch.testing.assert_close(a.token_attr, b.token_attr, rtol=0, atol=1e-12)


def test_earlier_generated_tokens_are_columns(model, tokenizer) -> None:
    result = LLMTokenAttribution(GradientXEmbedding(model), tokenizer).attribute(
        PROMPTS[1], target=TARGETS[1], attribute_generated=True
    )
    n_prompt = len(tokenizer.encode(PROMPTS[1]))
    assert result.input_tokens[n_prompt:] == result.output_tokens
    generated = result.token_attr[:, n_prompt:]
    # Row t scores y_<t only: zero at its own column and after.
    assert bool((generated.triu() == 0).all())
    earlier = torch.ones_like(generated, dtype=torch.bool).tril(-1)
    assert bool((generated[earlier] != 0).all())


def test_template_segments_sum_their_tokens(model, tokenizer) -> None:
    method = GradientXEmbedding(model)
    template = TextTemplateInput("{} sat on {} .", values=["the big cat", "a mat"])
    result = LLMTokenAttribution(method, tokenizer).attribute(template, target="it was")
    tokens = LLMTokenAttribution(method, tokenizer).attribute(
        "the big cat sat on a mat .", target="it was"
    )
    # <s> the big cat sat on a mat . -> segments: tokens 1-3 and 6-7
    expected = torch.stack(
        [tokens.token_attr[:, 1:4].sum(1), tokens.token_attr[:, 6:8].sum(1)], 1
    )
    assert result.input_tokens == ["the big cat", "a mat"]
    torch.testing.assert_close(result.token_attr, expected)
    grouped = TextTemplateInput(
        "{} sat on {} .", values=["the big cat", "a mat"], mask=[0, 0]
    )
    both = LLMTokenAttribution(method, tokenizer).attribute(grouped, target="it was")
    torch.testing.assert_close(
        both.token_attr, expected.sum(1, keepdim=True).expand(-1, 2)
    )


def test_chat_template_tokens_get_no_column(model, tokenizer) -> None:
    method = GradientXEmbedding(model)
    messages = [
        {"role": "system", "content": "you like red"},
        {"role": "user", "content": "what is the colour of sky ?"},
    ]
    result = LLMTokenAttribution(method, tokenizer).attribute(messages, target="blue")
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])[None]
    content = ~torch.isin(ids[0], torch.tensor(tokenizer.all_special_ids))
    expected = method.attribute(
        ids, target=torch.tensor([[tokenizer.convert_tokens_to_ids("blue")]])
    )
    assert result.input_tokens == "you like red what is the colour of sky ?".split()
    torch.testing.assert_close(result.token_attr, expected[0][:, content])
    one_user_message = LLMTokenAttribution(method, tokenizer).attribute(
        messages[1]["content"], target="blue", chat=True
    )
    assert one_user_message.input_tokens == messages[1]["content"].split()


# Contents a text search would find earlier in the rendered template: a role
# name, letters of a special token's text, an earlier message's content.
CHATS = [
    [{"role": "user", "content": "user"}],
    [{"role": "system", "content": "a"}, {"role": "user", "content": "im start"}],
    [
        {"role": "user", "content": "the cat"},
        {"role": "assistant", "content": "the cat"},
        {"role": "user", "content": "assistant"},
    ],
    [{"role": "user", "content": "start header id of turn end"}],
]


def _chat_layout(style, messages):
    r"""The tokens each style's template writes, assembled by hand, and which
    of them are a message's content."""
    open_, close = {
        "llama": (["<|start_header_id|>"], ["<|eot_id|>"]),
        "chatml": (["<|im_start|>"], ["<|im_end|>"]),
        "gemma": (["<start_of_turn>"], ["<end_of_turn>"]),
    }[style]
    header = {"llama": ["<|end_header_id|>"]}.get(style, [])
    role_of = {"gemma": {"assistant": "model"}}.get(style, {})
    tokens = {"llama": ["<|begin_of_text|>"], "gemma": ["<s>"]}.get(style, [])
    content = [False] * len(tokens)
    for message in messages + [{"role": "assistant", "content": None}]:
        role = role_of.get(message["role"], message["role"])
        tokens += open_ + [role] + header
        content += [False] * (len(open_) + 1 + len(header))
        if message["content"] is not None:  # None: the generation prompt
            words = message["content"].split()
            tokens += words + close
            content += [True] * len(words) + [False] * len(close)
    return tokens, torch.tensor(content)


@pytest.mark.parametrize("messages", CHATS)
@pytest.mark.parametrize("style", CHAT_STYLES)
def test_chat_content_located_by_the_template_not_by_text(
    model, style, messages
) -> None:
    tokenizer = tiny_chat_tokenizer(style)
    method = GradientXEmbedding(model)
    result = LLMTokenAttribution(method, tokenizer).attribute(messages, target="blue")
    tokens, content = _chat_layout(style, messages)
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == tokens  # the hand layout
    expected = method.attribute(
        torch.tensor([ids]),
        target=torch.tensor([[tokenizer.convert_tokens_to_ids("blue")]]),
    )[0][:, content]
    assert result.input_tokens == [w for m in messages for w in m["content"].split()]
    torch.testing.assert_close(result.token_attr, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "template, messages, message",
    [
        (  # the content glued to the role name: one token holds both
            "{% for m in messages %}<|im_start|>{{ m['role'] }}{{ m['content'] }}"
            "<|im_end|>{% endfor %}",
            [{"role": "user", "content": "user"}],
            "joins the content of message 0",
        ),
        (
            "{% for m in messages %}<|im_start|>{{ m['content'] | upper }}"
            "<|im_end|>{% endfor %}",
            [{"role": "user", "content": "the cat"}],
            "changes a message's content",
        ),
        (  # trims the content: its spaces are not where the text says
            CHAT_STYLES["llama"][1],
            [{"role": "user", "content": " the cat "}],
            "changes a message's content",
        ),
        (
            "{% for m in messages %}<|im_start|> {{ m['content'] }} "
            "{{ m['content'] }} <|im_end|>{% endfor %}",
            [{"role": "user", "content": "the cat"}],
            "message 0 2 times",
        ),
        (
            "{% for m in messages %}{% if m['role'] != 'system' %}<|im_start|> "
            "{{ m['content'] }} <|im_end|>{% endif %}{% endfor %}",
            [{"role": "system", "content": "red"}, {"role": "user", "content": "a"}],
            "message 0 0 times",
        ),
    ],
)
def test_chat_content_that_cannot_be_located_is_refused(
    model, template, messages, message
) -> None:
    tokenizer = tiny_chat_tokenizer("chatml")
    tokenizer.chat_template = template
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    with pytest.raises(ValueError, match=message):
        llm_attr.attribute(messages, target="blue")


def test_contrast_is_the_difference_for_one_step(model, tokenizer) -> None:
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    contrast = llm_attr.attribute(PROMPTS[0], target="red", contrast_target="blue")
    red = llm_attr.attribute(PROMPTS[0], target="red")
    blue = llm_attr.attribute(PROMPTS[0], target="blue")
    # Gradient x input is linear in the explained score.
    torch.testing.assert_close(contrast.token_attr, red.token_attr - blue.token_attr)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (dict(inp=PROMPTS[0], target=""), ValueError, "empty target"),
        (
            dict(inp=PROMPTS[0], target=torch.tensor([], dtype=torch.long)),
            ValueError,
            "empty target",
        ),
        (
            dict(inp=PROMPTS[0], target="red", contrast_target="a b"),
            ValueError,
            "one token per",
        ),
        (dict(inp=PROMPTS, target=TARGETS[:2]), ValueError, "list of 3 targets"),
        (dict(inp=PROMPTS[0], target="red", gen_args={}), ValueError, "gen_args"),
        (dict(inp="", target="red", skip_tokens=["<s>"]), ValueError, "empty prompt"),
        (dict(inp=3, target="red"), TypeError, "TextTokenInput"),
        (dict(inp=PROMPTS[0], target=[]), ValueError, "empty target: it holds no"),
        (dict(inp="the \ud800 cat", target="red"), ValueError, "the prompt holds"),
        (dict(inp=PROMPTS[0], target="r\udcffed"), ValueError, "target holds the"),
        (
            dict(inp=[{"role": "user", "content": "a \ud800"}], target="red"),
            ValueError,
            "the content of chat message 0 holds the lone surrogate",
        ),
        (
            dict(inp=TextTemplateInput("{} \ud800", values=["a"]), target="red"),
            ValueError,
            "the completed template holds the lone surrogate",
        ),
        (  # the tokenizer's special tokens, not the model's configured ids
            dict(inp="<|user|> <|system|>", target="red"),
            ValueError,
            "empty prompt: its tokens are all special tokens of the tokenizer",
        ),
        (dict(inp=PROMPTS[0], target=torch.tensor([0.5])), ValueError, "integers"),
    ],
)
def test_bad_calls(model, tokenizer, call, error, message) -> None:
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    with pytest.raises(error, match=message):
        llm_attr.attribute(**call)


def _out_of_vocabulary_prompt(tokenizer):
    inp = TextTokenInput(PROMPTS[0], tokenizer)
    inp.inp_tensor = inp.inp_tensor.clone()
    inp.inp_tensor[0, 2] = 500
    return inp


@pytest.mark.parametrize(
    "call, message",
    [
        (
            dict(inp=PROMPTS[0], gen_args={"max_new_tokens": 60}),
            r"the prompt \(7 tokens\) \+ max_new_tokens \(60\) need 67 positions "
            "but the model has only 64",
        ),
        (
            dict(inp=PROMPTS[0], gen_args={"num_return_sequences": 2}),
            "num_return_sequences=2 returns 2 continuations per prompt",
        ),
        (
            dict(inp=PROMPTS, gen_args={"num_beams": 2, "num_return_sequences": 2}),
            "num_return_sequences=2 returns 2 continuations per prompt",
        ),
        (dict(inp=PROMPTS[0], gen_args={"max_new_tokens": 0}), "max_new_tokens must"),
        (dict(inp=PROMPTS[0], gen_args=[("max_new_tokens", 2)]), "gen_args must be"),
        ("out of vocabulary", r"prompt token ids must be in \[0, 99\)"),
    ],
)
def test_generation_inputs_are_checked_before_generating(
    model, tokenizer, monkeypatch, call, message
) -> None:
    def generate(*args, **kwargs):
        raise AssertionError("generate() ran before the inputs were checked")

    monkeypatch.setattr(model, "generate", generate)
    if call == "out of vocabulary":
        call = dict(inp=_out_of_vocabulary_prompt(tokenizer))
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    with pytest.raises((ValueError, TypeError), match=message):
        llm_attr.attribute(**call)


def test_a_tokenizer_larger_than_the_model_is_refused(model) -> None:
    tokenizer = tiny_lm_tokenizer()
    tokenizer.add_tokens(["zebra"])
    with pytest.raises(ValueError, match="the tokenizer has 100 tokens but the mod"):
        LLMTokenAttribution(GradientXEmbedding(model), tokenizer)


def test_generate_returning_a_dict_is_explained_as_its_sequences(
    model, tokenizer
) -> None:
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    plain = llm_attr.attribute(PROMPTS[0], gen_args={"max_new_tokens": 3})
    as_dict = llm_attr.attribute(
        PROMPTS[0], gen_args={"max_new_tokens": 3, "return_dict_in_generate": True}
    )
    assert as_dict.output_tokens == plain.output_tokens
    torch.testing.assert_close(as_dict.token_attr, plain.token_attr, rtol=0, atol=0)


def test_a_method_on_a_classifier_is_refused(tokenizer) -> None:
    with pytest.raises(
        UnsupportedModelError, match="is a sequence classifier.*AutoModelForCausalLM"
    ):
        LLMTokenAttribution(GradientXEmbedding(tiny_classifier("gpt2")), tokenizer)
    with pytest.raises(TypeError, match="no .model"):
        LLMTokenAttribution(object(), tokenizer)
