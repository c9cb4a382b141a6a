#!/usr/bin/env python3

import zlib
from typing import Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from captum_ext.metrics._utils.inputs import TokenOptions

__all__ = ["TokenSubsetPerturbation"]


class TokenSubsetPerturbation:
    r"""
    A ``perturb_func`` for :func:`captum.metrics.infidelity` and
    :func:`captum.metrics.sensitivity_max` on token ids: each draw replaces a
    random subset :math:`S` of a row's perturbable tokens by one token id
    (e.g. [MASK]), the attention mask unchanged,

    .. math::
        \tilde{x}_i = \begin{cases} r & i \in S \\ x_i & i \notin S
        \end{cases}, \qquad I_i = \mathbb{1}[i \in S].

    Captum's default perturbations add Gaussian or uniform noise to the
    inputs, which for token ids gives other, unrelated tokens. Here
    :math:`I` is the 0/1 indicator of the replaced tokens, so infidelity
    compares :math:`\sum_i \Phi_i I_i`, the attributions of the replaced
    tokens, with :math:`f(x) - f(\tilde{x})` (Yeh et al., "On the (In)fidelity
    and Sensitivity of Explanations", NeurIPS 2019,
    https://arxiv.org/abs/1901.09392: binary perturbations for attributions
    that factor in the input); sensitivity_max compares the
    explanations of :math:`x` and :math:`\tilde{x}`.

    A token is perturbable unless it is ``tokens.pad_token_id`` or one of
    ``tokens.special_token_ids``. Each draw gives every perturbable token a
    key :math:`u_i \sim U(0, 1)`; :math:`S` holds the tokens with
    :math:`u_i < p` (``probability``: every subset equally likely at
    :math:`p = 1/2`) or, with ``size`` :math:`k`, the :math:`k` tokens of
    smallest key (all of them when fewer). The keys of a row's draw
    :math:`j` come from a ``torch.Generator`` seeded with a CRC-32 of
    ``seed``, the row's non-padding token ids and :math:`j`, laid out on its
    non-padding positions in order, so a row gets the same draws whatever
    its padding and batch. :math:`j` counts the calls in which this object
    met the row (Captum's metrics call ``perturb_func`` on each example
    repeated ``n_perturb_samples`` times, in chunks of
    ``max_examples_per_batch``; identical rows take successive draws): use
    one object per metric call for values that do not depend on earlier
    calls.

    Args:

        replacement_id (int): the id :math:`r` put in place of the chosen
                tokens, e.g. ``tokenizer.mask_token_id``.
        tokens (TokenOptions, optional): ``pad_token_id`` and
                ``special_token_ids``: tokens that are never replaced.
                Default: None (every token may be replaced)
        probability (float, optional): :math:`p`, the chance that each
                perturbable token is replaced, in (0, 1]. Default: 0.5
        size (int, optional): replace exactly ``size`` tokens per draw
                (all perturbable tokens when fewer) instead of each with
                ``probability``. Default: None
        indicator (bool, optional): return ``(I, perturbed_ids)`` as
                :func:`~captum.metrics.infidelity` expects; False:
                ``perturbed_ids`` alone, as
                :func:`~captum.metrics.sensitivity_max` expects.
                Default: True
        seed (int, optional): the draws' seed. Default: 0

    Examples::

        >>> from captum.metrics import infidelity, sensitivity_max
        >>> tokens = TokenOptions.from_tokenizer(tokenizer)
        >>> perturb = TokenSubsetPerturbation(tokenizer.mask_token_id, tokens=tokens)
        >>> infid = infidelity(forward, perturb, input_ids, scores,
        >>>                    additional_forward_args=(attention_mask,),
        >>>                    target=target, normalize=True)
    """

    def __init__(
        self,
        replacement_id: int,
        *,
        tokens: Optional[TokenOptions] = None,
        probability: float = 0.5,
        size: Optional[int] = None,
        indicator: bool = True,
        seed: int = 0,
    ) -> None:
        if not 0.0 < probability <= 1.0:
            raise ValueError(f"probability must be in (0, 1], got {probability}")
        if size is not None and size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        tokens = tokens or TokenOptions()
        if tokens.special_tokens_mask is not None:
            raise ValueError(
                "tokens.special_tokens_mask is per batch and perturb_func sees "
                "repeated rows: give special_token_ids instead"
            )
        self.replacement_id = int(replacement_id)
        self.tokens = tokens
        self.probability = probability
        self.size = size
        self.indicator = indicator
        self.seed = seed
        self.draws: Dict[bytes, int] = {}  # row key -> draws made so far

    def __call__(
        self, inputs: Union[Tensor, Tuple[Tensor, ...]]
    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        # [rows, pos]: each example repeated n_perturb_samples times
        input_ids: Tensor = inputs[0] if isinstance(inputs, tuple) else inputs
        real = self._real(input_ids)
        perturbable = real & ~self._special_positions(input_ids)
        chosen = self._chosen(self._keys(input_ids, real), perturbable)
        perturbed = input_ids.masked_fill(chosen, self.replacement_id)
        if self.indicator:
            return chosen.to(torch.get_default_dtype()), perturbed
        return perturbed

    def _real(self, input_ids: Tensor) -> Tensor:
        r"""Boolean ``[rows, pos]``: the non-padding positions."""
        if self.tokens.pad_token_id is None:
            return torch.ones_like(input_ids, dtype=torch.bool)
        return input_ids != self.tokens.pad_token_id

    def _keys(self, input_ids: Tensor, real: Tensor) -> Tensor:
        r"""``[rows, pos]`` uniform keys of each row's next draw (2 at padding)."""
        keys = torch.full(input_ids.shape, 2.0, dtype=torch.float64)
        for row, (ids, kept) in enumerate(zip(input_ids.cpu(), real.cpu())):
            content = ids[kept].numpy().tobytes()
            draw = self.draws.get(content, 0)
            self.draws[content] = draw + 1
            crc = zlib.crc32(repr((self.seed, draw)).encode() + content)
            generator = torch.Generator().manual_seed(crc)
            keys[row, kept] = torch.rand(int(kept.sum()), generator=generator).double()
        return keys.to(input_ids.device)

    def _special_positions(self, input_ids: Tensor) -> Tensor:
        if not self.tokens.special_token_ids:
            return torch.zeros_like(input_ids, dtype=torch.bool)
        ids = torch.tensor(self.tokens.special_token_ids, device=input_ids.device)
        return torch.isin(input_ids, ids.to(input_ids.dtype))

    def _chosen(self, keys: Tensor, perturbable: Tensor) -> Tensor:
        keys = keys.masked_fill(~perturbable, 2.0)
        if self.size is None:
            return keys < self.probability
        # The ``size`` smallest keys of each row, perturbable ones only.
        rank = keys.argsort(dim=1, stable=True).argsort(dim=1)
        return (rank < self.size) & perturbable
