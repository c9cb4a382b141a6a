#!/usr/bin/env python3
r"""Captum's client code -- the calls of its LLM attribution tutorial
(``tutorials/Llama2_LLM_Attribution.ipynb``) and of its tests
(``tests/attr/test_llm_attr.py``) -- written as Captum's users write them, on
tiny GPT-2 and Llama models and the words of the tiny tokenizer, run on Captum
0.9.0's class and on :class:`LLMTokenAttribution` with only the wrapper and the
method changed. Each call behaves as Captum's (the same tokens and shapes, the
same values where both compute the same quantity) or raises an error that
names the argument."""

from typing import Any, Dict

import pytest
import torch
from captum.attr import (
    FeatureAblation,
    LayerGradientXActivation,
    LLMAttribution,
    LLMGradientAttribution,
    ProductBaselines,
    TextTemplateInput,
    TextTokenInput,
)
from captum_ext.attr import AttCAT, CAT, LLMTokenAttribution, LogAt

from tests.attr.contract_method import GradientXEmbedding
from tests.attr.llm_fixtures import tiny_lm_tokenizer
from tests.helpers import CAUSAL_FAMILIES, tiny_causal_lm

# The tutorial's prompt and target, in the tiny tokenizer's words.
EVAL_PROMPT = "the cat sat on a mat and it was small"
TARGET = "the dog ran to the house ."
SKIP_TOKENS = [1]  # skip the special token for the start of the text <s>
TEMPLATE = "{} sat on {} , {} and was a {} . {} like"
VALUES = ["the cat", "a mat", "red", "dog", "you"]


def tutorial_tokens(llm_attr, tokenizer):
    inp = TextTokenInput(EVAL_PROMPT, tokenizer, skip_tokens=SKIP_TOKENS)
    return llm_attr.attribute(inp, target=TARGET, skip_tokens=SKIP_TOKENS)


def tutorial_template(llm_attr, tokenizer):
    inp = TextTemplateInput(template=TEMPLATE, values=VALUES)
    return llm_attr.attribute(inp, target=TARGET, skip_tokens=SKIP_TOKENS)


def tutorial_baselines(llm_attr, tokenizer):
    inp = TextTemplateInput(
        template=TEMPLATE,
        values=VALUES,
        baselines=["a dog", "the house", "blue", "cat", "i"],
    )
    return llm_attr.attribute(inp, target=TARGET, skip_tokens=SKIP_TOKENS)


def tutorial_product_baselines(llm_attr, tokenizer):
    baselines = ProductBaselines(
        {
            ("name", "pronoun"): [("a dog", "i"), ("the house", "it")],
            ("city", "state"): [("the mat", "blue"), ("a house", "big")],
            "occupation": ["cat", "mat", "house"],
        }
    )
    inp = TextTemplateInput(
        "{name} sat on {city} , {state} and was a {occupation} . {pronoun} like",
        values={
            "name": "the cat",
            "city": "a mat",
            "state": "red",
            "occupation": "dog",
            "pronoun": "you",
        },
        baselines=baselines,
        mask={"name": 0, "city": 1, "state": 1, "occupation": 2, "pronoun": 0},
    )
    return llm_attr.attribute(inp, target=TARGET, skip_tokens=SKIP_TOKENS, num_trials=3)


def prompt_fn(*examples):
    main_prompt = "is the sky blue ?"
    subset = [elem for elem in examples if elem]
    if not subset:
        prompt = main_prompt
    else:
        prefix = "hello , "
        prompt = prefix + " , ".join(subset) + " . " + main_prompt
    return "what " + prompt + " ?"


def tutorial_prompt_fn(llm_attr, tokenizer):
    # An empty example: prompt_fn drops its slot.
    input_examples = ["the cat was big", "", "a dog ran", "i like red"]
    inp = TextTemplateInput(prompt_fn, values=input_examples)
    return llm_attr.attribute(inp, skip_tokens=SKIP_TOKENS)


def captum_tests_template(llm_attr, tokenizer):
    inp = TextTemplateInput("{} sat {} {} on {}", ["the", "cat", "dog", "mat"])
    return llm_attr.attribute(inp, "it was big red", skip_tokens=[0])


def captum_tests_tensor_target(llm_attr, tokenizer):
    inp = TextTokenInput("a cat ran", tokenizer)
    return llm_attr.attribute(
        inp, torch.tensor(tokenizer.encode("it was big", add_special_tokens=False))
    )


def captum_tests_without_target(llm_attr, tokenizer):
    inp = TextTemplateInput("{} sat {} {} on {}", ["the", "cat", "dog", "mat"])
    return llm_attr.attribute(inp, gen_args={"max_new_tokens": 3})


def partial_gen_args(llm_attr, tokenizer):
    inp = TextTokenInput(EVAL_PROMPT, tokenizer, skip_tokens=SKIP_TOKENS)
    return llm_attr.attribute(inp, gen_args={"do_sample": False})


def repeated_value(llm_attr, tokenizer):
    inp = TextTemplateInput(
        "{name} sat on {place} . {name} ran to {place}",
        values={"name": "the cat", "place": "a mat"},
    )
    return llm_attr.attribute(inp, target=TARGET)


# name -> (the cell, LLMTokenAttribution's outcome: None = as Captum's, or
# (error, message)).
CELLS: Dict[str, Any] = {
    "tokens": (tutorial_tokens, None),
    "template": (tutorial_template, None),
    "baselines": (tutorial_baselines, (ValueError, "has baselines, but .* perturbs")),
    "product baselines": (
        tutorial_product_baselines,
        (ValueError, "has baselines, but .* perturbs"),
    ),
    "prompt_fn with an empty example": (tutorial_prompt_fn, None),
    "template with skip_tokens=[0]": (captum_tests_template, None),
    "tensor target": (captum_tests_tensor_target, None),
    "without target": (captum_tests_without_target, None),
    "partial gen_args": (partial_gen_args, None),
    "repeated value": (repeated_value, None),
}

METHODS = {
    "GradientXEmbedding": GradientXEmbedding,
    "CAT": CAT,
    "AttCAT": AttCAT,
    "LogAt": LogAt,
}


class TeacherForcedLLMAttribution(LLMAttribution):
    r"""Captum's ``LLMAttribution`` with ``use_cached_outputs=False`` by default:
    its cached decoding disagrees with teacher forcing on transformers 5."""

    def attribute(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("use_cached_outputs", False)
        return super().attribute(*args, **kwargs)


@pytest.fixture(
    scope="module",
    params=[(f, a) for f in CAUSAL_FAMILIES for a in ("eager", "sdpa")],
    ids=lambda param: "-".join(param),
)
def model(request):
    family, attn_implementation = request.param
    return tiny_causal_lm(
        family, dtype=torch.float64, attn_implementation=attn_implementation
    )


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_lm_tokenizer()


@pytest.fixture(scope="module")
def captum_results(model, tokenizer):
    llm_attr = TeacherForcedLLMAttribution(FeatureAblation(model), tokenizer)
    return {name: cell(llm_attr, tokenizer) for name, (cell, _) in CELLS.items()}


@pytest.mark.filterwarnings("error::UserWarning:captum_ext")
@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("cell", CELLS)
def test_captums_calls_run_as_captums_or_say_why_not(
    model, tokenizer, captum_results, name, cell
) -> None:
    call, refusal = CELLS[cell]
    llm_attr = LLMTokenAttribution(METHODS[name](model), tokenizer)
    if refusal is not None:
        error, message = refusal
        with pytest.raises(error, match=message):
            call(llm_attr, tokenizer)
        return
    ours, captum = call(llm_attr, tokenizer), captum_results[cell]
    assert ours.input_tokens == captum.input_tokens
    assert ours.output_tokens == captum.output_tokens
    assert ours.token_attr.shape == captum.token_attr.shape
    assert ours.seq_attr.shape == captum.seq_attr.shape
    torch.testing.assert_close(ours.seq_attr, ours.token_attr.sum(0))


def test_partial_gen_args_are_not_merged_over_captums_defaults(
    captum_results,
) -> None:
    # Without max_new_tokens transformers generates 20 tokens (Captum's
    # defaults, 25, apply only when gen_args is not given).
    assert len(captum_results["partial gen_args"].output_tokens) == 20


def test_a_sampling_generation_config_samples(tokenizer) -> None:
    model = tiny_causal_lm("llama", dtype=torch.float64)
    model.generation_config.do_sample = True
    outputs = []
    for llm_attr in (
        TeacherForcedLLMAttribution(FeatureAblation(model), tokenizer),
        LLMTokenAttribution(GradientXEmbedding(model), tokenizer),
    ):
        for seed in (0, 1):
            torch.manual_seed(seed)
            inp = TextTokenInput(EVAL_PROMPT, tokenizer, skip_tokens=SKIP_TOKENS)
            result = llm_attr.attribute(inp, gen_args={"max_new_tokens": 8})
            outputs.append(result.output_tokens)
    captum_0, captum_1, ours_0, ours_1 = outputs
    assert (ours_0, ours_1) == (captum_0, captum_1)
    assert ours_0 != ours_1  # sampled, not greedy


def test_a_repeated_value_scores_every_occurrence(model, tokenizer) -> None:
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    result = repeated_value(llm_attr, tokenizer)
    tokens = llm_attr.attribute(
        "the cat sat on a mat . the cat ran to a mat", target=TARGET
    ).token_attr
    # <s> the cat sat on a mat . the cat ran to a mat
    name, place = tokens[:, [1, 2, 8, 9]].sum(1), tokens[:, [5, 6, 12, 13]].sum(1)
    torch.testing.assert_close(result.token_attr, torch.stack([name, place], 1))


def test_an_empty_value_is_a_zero_column(model, tokenizer) -> None:
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    result = tutorial_prompt_fn(llm_attr, tokenizer)
    assert bool((result.token_attr[:, 1] == 0).all())
    assert bool((result.token_attr[:, [0, 2, 3]] != 0).all())
    text = prompt_fn("the cat was big", "", "a dog ran", "i like red")
    tokens = llm_attr.attribute(
        text,
        target=torch.tensor([tokenizer.convert_tokens_to_ids(result.output_tokens)]),
    ).token_attr
    # <s> what hello , the cat was big , a dog ran , i like red . is ...
    expected = [tokens[:, 4:8].sum(1), tokens[:, 9:12].sum(1), tokens[:, 13:16].sum(1)]
    torch.testing.assert_close(
        result.token_attr[:, [0, 2, 3]], torch.stack(expected, 1)
    )


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("family", CAUSAL_FAMILIES)
@pytest.mark.parametrize("skip", [None, [1]])
def test_gradient_x_embedding_equals_captums(
    tokenizer, family, attn_implementation, skip
) -> None:
    model = tiny_causal_lm(
        family, dtype=torch.float64, attn_implementation=attn_implementation
    )
    results = []
    for llm_attr in (
        LLMGradientAttribution(
            LayerGradientXActivation(model, model.get_input_embeddings()), tokenizer
        ),
        LLMTokenAttribution(GradientXEmbedding(model), tokenizer),
    ):
        # Captum's tests' call (its LLMGradientAttribution takes no skip_tokens).
        inp = TextTokenInput("a cat ran", tokenizer, skip_tokens=skip)
        results.append(llm_attr.attribute(inp, "it was big red"))
    captum, ours = results
    assert ours.input_tokens == captum.input_tokens
    assert ours.output_tokens == captum.output_tokens
    # Llama's eager attention takes its softmax in float32 even in a float64
    # model, and Captum runs one forward per step where ours is one
    # teacher-forced pass: they agree to float32's rounding there (2.9e-9
    # measured), to float64's elsewhere (0 or 1.4e-17).
    atol = 1e-8 if attn_implementation == "eager" else 1e-12
    torch.testing.assert_close(ours.token_attr, captum.token_attr, rtol=0, atol=atol)
    torch.testing.assert_close(ours.seq_attr, captum.seq_attr, rtol=0, atol=atol)


def test_skip_tokens_is_ignored_for_captums_inputs_as_captum_does(
    model, tokenizer
) -> None:
    inp = TextTokenInput("a cat ran", tokenizer)  # <s> keeps its column
    captum = TeacherForcedLLMAttribution(FeatureAblation(model), tokenizer).attribute(
        inp, "it was", skip_tokens=[1]
    )
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    with pytest.warns(UserWarning, match=r"skip_tokens=...\) is ignored .*\['<s>'\]"):
        ours = llm_attr.attribute(inp, "it was", skip_tokens=[1])
    assert ours.input_tokens == captum.input_tokens == ["<s>", "a", "cat", "ran"]
    template = TextTemplateInput("{} sat on {}", values=["the cat", "a mat"])
    with pytest.warns(UserWarning, match=r"\['cat'\] keep theirs.*template's text"):
        llm_attr.attribute(template, "it", skip_tokens=["cat"])


def test_skip_tokens_drops_a_chats_tokens(model, tokenizer) -> None:
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    messages = [{"role": "user", "content": "the cat sat on a mat"}]
    whole = llm_attr.attribute(messages, target="it")
    skipped = llm_attr.attribute(messages, target="it", skip_tokens=["the", "a"])
    assert skipped.input_tokens == ["cat", "sat", "on", "mat"]
    torch.testing.assert_close(skipped.token_attr, whole.token_attr[:, [1, 2, 3, 5]])


def _p_gradient_x_embedding(model, tokenizer, prompt: str, target: str) -> Any:
    r"""Gradient x word embedding of :math:`p(y_1 | \text{prompt})`, by hand."""
    ids = torch.tensor([tokenizer.encode(prompt)])
    (y,) = tokenizer.encode(target, add_special_tokens=False)
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    prob = model(inputs_embeds=embeds).logits[0, -1].softmax(-1)[y]
    (grad,) = torch.autograd.grad(prob, embeds)
    return (grad * embeds).sum(-1)[0].detach(), prob.detach()


@pytest.mark.parametrize("name", ["GradientXEmbedding", "CAT", "AttCAT"])
def test_attr_target_prob_is_p_times_the_log_prob_rows(model, tokenizer, name) -> None:
    method = METHODS[name](model)
    log_prob = LLMTokenAttribution(method, tokenizer, attr_target="log_prob")
    prob = LLMTokenAttribution(method, tokenizer, attr_target="prob")
    default = LLMTokenAttribution(method, tokenizer)
    rows = log_prob.attribute(EVAL_PROMPT, target="it was big")
    scored = prob.attribute(EVAL_PROMPT, target="it was big")
    torch.testing.assert_close(
        default.attribute(EVAL_PROMPT, target="it was big").token_attr, rows.token_attr
    )
    ids = torch.tensor([tokenizer.encode(EVAL_PROMPT + " it was big")])
    with torch.no_grad():
        log_probs = model(ids).logits[0].log_softmax(-1)
    steps = torch.stack([log_probs[10 + t, ids[0, 11 + t]] for t in range(3)]).exp()
    torch.testing.assert_close(scored.token_attr, rows.token_attr * steps[:, None])
    # seq_attr explains p(y) = prod_t p(y_t), as Captum's attr_target="prob".
    torch.testing.assert_close(scored.seq_attr, rows.seq_attr * steps.prod())
    if name == "GradientXEmbedding":  # against the gradient of p itself
        expected, p = _p_gradient_x_embedding(model, tokenizer, EVAL_PROMPT, "it")
        one = prob.attribute(EVAL_PROMPT, target="it")
        torch.testing.assert_close(one.token_attr[0], expected)
        torch.testing.assert_close(p, steps[0])


@pytest.mark.parametrize(
    "build, call, error, message",
    [
        (
            lambda model: LogAt(model),
            dict(attr_target="log_prob"),
            ValueError,
            "attr_target='log_prob' cannot be honoured by LogAt",
        ),
        (
            lambda model: CAT(model, objective="logit"),
            dict(attr_target="prob"),
            ValueError,
            "cannot be honoured by CAT: it explains the logit of y_t",
        ),
        (
            GradientXEmbedding,
            dict(attr_target="probability"),
            ValueError,
            r"attr_target must be one of \('log_prob', 'prob'\)",
        ),
    ],
)
def test_an_attr_target_the_method_cannot_honour_is_refused(
    model, tokenizer, build, call, error, message
) -> None:
    with pytest.raises(error, match=message):
        LLMTokenAttribution(build(model), tokenizer, **call)


@pytest.mark.parametrize(
    "keyword, owners",
    [
        ("n_samples", "ShapleyValueSampling, Lime, KernelShap, LayerGradientShap"),
        ("show_progress", "FeatureAblation, ShapleyValueSampling"),
        ("n_steps", "LayerIntegratedGradients"),
    ],
)
def test_a_keyword_of_captums_methods_names_the_wrapped_method(
    model, tokenizer, keyword, owners
) -> None:
    llm_attr = LLMTokenAttribution(AttCAT(model), tokenizer)
    message = f"{keyword} is not a keyword of AttCAT.attribute\\(\\); .*{owners}"
    with pytest.raises(TypeError, match=message):
        keywords: Dict[str, Any] = {keyword: 3}
        llm_attr.attribute(EVAL_PROMPT, target="it", **keywords)


def test_attribute_future_is_not_implemented_as_in_captum(model, tokenizer) -> None:
    for llm_attr in (
        LLMAttribution(FeatureAblation(model), tokenizer),
        LLMTokenAttribution(GradientXEmbedding(model), tokenizer),
    ):
        with pytest.raises(NotImplementedError, match="attribute_future"):
            llm_attr.attribute_future()


def test_prob_with_a_contrast_is_refused(model, tokenizer) -> None:
    llm_attr = LLMTokenAttribution(CAT(model), tokenizer, attr_target="prob")
    with pytest.raises(ValueError, match="attr_target='prob' with contrast_target"):
        llm_attr.attribute(EVAL_PROMPT, target="red", contrast_target="blue")


def test_the_tutorials_gradient_cell_runs_where_captum_090_refuses_it(
    model, tokenizer
) -> None:
    inp = TextTokenInput(EVAL_PROMPT, tokenizer, skip_tokens=SKIP_TOKENS)
    captum = LLMGradientAttribution(
        LayerGradientXActivation(model, model.get_input_embeddings()), tokenizer
    )
    # Captum 0.9.0 hands skip_tokens to the wrapped method, which takes none.
    with pytest.raises(TypeError, match="unexpected keyword argument 'skip_tokens'"):
        captum.attribute(inp, target=TARGET, skip_tokens=SKIP_TOKENS)
    llm_attr = LLMTokenAttribution(GradientXEmbedding(model), tokenizer)
    ours = llm_attr.attribute(inp, target=TARGET, skip_tokens=SKIP_TOKENS)
    expected = captum.attribute(inp, target=TARGET)
    assert ours.input_tokens == expected.input_tokens
    # 1e-8: Llama's eager float32 softmax (see the test above).
    torch.testing.assert_close(ours.token_attr, expected.token_attr, rtol=0, atol=1e-8)


@pytest.mark.parametrize("baselines", ["<unk>", 5])
def test_a_text_token_input_with_baselines_is_refused(
    model, tokenizer, baselines
) -> None:
    inp = TextTokenInput(EVAL_PROMPT, tokenizer, baselines=baselines)
    captum = TeacherForcedLLMAttribution(FeatureAblation(model), tokenizer)
    assert captum.attribute(inp, target="it").seq_attr.shape == (11,)
    llm_attr = LLMTokenAttribution(CAT(model), tokenizer)
    with pytest.raises(ValueError, match="TextTokenInput has baselines, but CAT"):
        llm_attr.attribute(inp, target="it")
    # Captum's default (0) is no choice of the user's: accepted.
    llm_attr.attribute(TextTokenInput(EVAL_PROMPT, tokenizer, baselines=0), "it")
