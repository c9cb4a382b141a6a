#!/usr/bin/env python3
r"""Text from data or a model made safe to show: in a terminal
(:func:`terminal_safe`) and in HTML (:func:`html_safe`)."""

import html

__all__ = ["html_safe", "terminal_safe"]


def terminal_safe(text: str) -> str:
    r"""Every character that is not printable (control characters such as ESC,
    BEL and NUL, bidi overrides such as U+202E, line separators) shown as a
    visible escape (``\x1b``, ``\u202e``), so a token, a text or a class name
    can neither emit terminal escape sequences nor silently reorder what is
    shown around it."""
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(character: str) -> str:
    return character.encode("unicode_escape").decode("ascii")


def html_safe(text: str) -> str:
    r""":func:`terminal_safe`, then HTML-escaped: text from data or a model as
    it goes into a page."""
    return html.escape(terminal_safe(text))
