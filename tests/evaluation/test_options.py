#!/usr/bin/env python3
r"""captum_ext.evaluation.options: the one default of max_new_tokens and the
gen_args built from it."""

from captum.attr._core.llm_attr import DEFAULT_GEN_ARGS
from captum_ext.evaluation.options import continuation_gen_args, DEFAULT_MAX_NEW_TOKENS


def test_the_default_is_captums():
    assert DEFAULT_MAX_NEW_TOKENS == DEFAULT_GEN_ARGS["max_new_tokens"] == 25


def test_gen_args_are_captums_greedy_defaults_with_the_given_count():
    # Given gen_args replace Captum's defaults, so they are all written out.
    assert continuation_gen_args(None) == DEFAULT_GEN_ARGS
    assert continuation_gen_args(3) == {**DEFAULT_GEN_ARGS, "max_new_tokens": 3}
