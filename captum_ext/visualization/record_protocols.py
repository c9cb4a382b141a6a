#!/usr/bin/env python3
r"""What the views read of a record, as protocols: the renderers take any object
with these fields (the records of :mod:`captum_ext.visualization.records` are
the ones the package builds), so the records can use the renderers for their
own ``repr`` and notebook view without the renderers importing them back."""

from typing import Dict, List, Optional, Protocol

from torch import Tensor

__all__ = ["ExplanationFields", "GenerationFields"]


class ExplanationFields(Protocol):
    r"""One input's prediction and every method's token scores
    (:class:`~captum_ext.visualization.Explanation`)."""

    tokens: List[str]
    scores: Dict[str, Tensor]
    pred_class: int
    pred_prob: float
    target: int
    true_class: Optional[int]
    text: Optional[str]

    def label(self, index: Optional[int]) -> str: ...

    def specials(self) -> List[bool]: ...


class GenerationFields(Protocol):
    r"""A prompt, its continuation and every method's target x prompt scores
    (:class:`~captum_ext.visualization.GenerationExplanation`)."""

    prompt_tokens: List[str]
    target_tokens: List[str]
    scores: Dict[str, Tensor]
    prompt: str
    continuation: str
    generated: bool
    prompt_unit: str
    evidence: Optional[List[int]]

    def specials(self) -> List[bool]: ...

    def prompt_texts(self) -> List[str]: ...
