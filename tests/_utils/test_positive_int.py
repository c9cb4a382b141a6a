#!/usr/bin/env python3
r"""captum_ext._utils.positive_int: the one positive-int check, and
check_internal_batch_size on top of it."""

import pytest
from captum_ext._utils.positive_int import check_positive_int
from captum_ext._utils.row_chunks import check_internal_batch_size


@pytest.mark.parametrize("value", [None, 1, 7])
def test_none_and_positive_ints_pass_unchanged(value):
    assert check_positive_int(value, "batch_size") is value


@pytest.mark.parametrize(
    "value, error, message",
    [
        (0, ValueError, "max_length must be a positive int, got 0"),
        (-2, ValueError, "max_length must be a positive int, got -2"),
        (True, TypeError, "max_length must be a positive int or None, got True"),
        (2.0, TypeError, "max_length must be a positive int or None, got 2.0"),
    ],
)
def test_anything_else_is_refused_by_name(value, error, message):
    with pytest.raises(error) as raised:
        check_positive_int(value, "max_length")
    assert str(raised.value) == message


def test_the_unit_says_what_is_counted():
    with pytest.raises(ValueError) as raised:
        check_internal_batch_size(0)
    expected = "internal_batch_size must be a positive int (examples per chunk), got 0"
    assert str(raised.value) == expected
