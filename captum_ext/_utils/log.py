#!/usr/bin/env python3
r"""Captum's usage-logging decorator with a type: Captum ships no type
information, so ``captum.log.log_usage`` would make every decorated method and
metric untyped for its callers (mypy's ``untyped-decorator``)."""

from typing import Any, Callable, cast, TypeVar

from captum.log import log_usage as _captum_log_usage

__all__ = ["log_usage"]

F = TypeVar("F", bound=Callable[..., Any])


def log_usage(*log_args: Any, **log_kwargs: Any) -> Callable[[F], F]:
    r"""``captum.log.log_usage(*log_args, **log_kwargs)``, typed: the decorated
    function keeps its own signature (Captum's wrapper only forwards the call)."""
    return cast(Callable[[F], F], _captum_log_usage(*log_args, **log_kwargs))
