#!/usr/bin/env python3

from typing import Any, Callable, Optional, Tuple, Union

import torch
from torch import Tensor

from captum_ext.metrics._utils.inputs import TokenOptions

__all__ = ["PatchTokens"]


class PatchTokens:
    r"""
    Images as sequences of patch tokens, so that every token metric
    (:func:`~captum_ext.metrics.aopc`, :func:`~captum_ext.metrics.log_odds`,
    :func:`~captum_ext.metrics.sufficiency`,
    :func:`~captum_ext.metrics.kendall_tau`, ...) and Captum's
    :func:`~captum.metrics.infidelity` and
    :func:`~captum.metrics.sensitivity_max` with
    :class:`~captum_ext.metrics.TokenSubsetPerturbation` scores a vision
    transformer's ``[batch, class_tokens + patches]`` attributions by masking
    patches.

    A vision transformer reads image :math:`b` as its class token(s)
    followed by the patches row by row. Here that sequence gets token ids:
    class token :math:`k` is :math:`k`, the mask token is :math:`c` (the
    number of class tokens) and patch :math:`p` of image :math:`b` is
    :math:`c + 1 + b P + p` (:math:`P` patches per image). The forward
    function of :meth:`forward_func` turns a row of such ids back into
    pixels, patch :math:`p` kept where its id is present and attended,

    .. math::
        \tilde{x}_{p} = \begin{cases} x_{p} & \text{id of } p
        \text{ present and attended} \\ \beta & \text{otherwise}
        \end{cases}

    with :math:`\beta` the ``baseline``. So removing, masking or padding a
    token (every ``mode`` of a
    :class:`~captum_ext.metrics.PerturbationProtocol`) all mask its patch.
    The class tokens are :attr:`tokens`' special ids: the metrics never
    remove, rank or count them, and a row without one raises (a vision
    transformer cannot drop its class token).

    Args:

        pixel_values (Tensor): the images ``[batch, channels, height, width]``.
        patch_size (int or tuple of int): the model's patch size, ``(height,
                width)`` or one int for square patches; it must divide the
                image.
        class_tokens (int, optional): tokens before the patches (1 for ViT's
                [CLS], 2 for DeiT's class and distillation tokens).
                Default: 1
        baseline (float or Tensor, optional): :math:`\beta`, the pixel value
                of a masked patch, a float or a tensor broadcastable to
                ``[channels, height, width]`` (e.g. per-channel values
                ``[channels, 1, 1]``). Default: 0.0 (the mean after a
                processor's normalisation)

    Examples::

        >>> view = PatchTokens(pixel_values, patch_size=16)
        >>> scores = AttCAT(model).attribute(pixel_values, target=target)
        >>> logits = lambda pixels: model(pixel_values=pixels).logits
        >>> aopc(view.forward_func(logits), view.input_ids, scores,
        ...      target=target, tokens=view.tokens)
    """

    def __init__(
        self,
        pixel_values: Tensor,
        patch_size: Union[int, Tuple[int, int]],
        class_tokens: int = 1,
        baseline: Union[float, Tensor] = 0.0,
    ) -> None:
        if not isinstance(pixel_values, Tensor) or pixel_values.dim() != 4:
            got = (
                tuple(pixel_values.shape)
                if isinstance(pixel_values, Tensor)
                else type(pixel_values)
            )
            raise ValueError(
                f"pixel_values must be images [batch, channels, height, width], "
                f"got {got}"
            )
        if class_tokens < 1:
            raise ValueError(f"class_tokens must be at least 1, got {class_tokens}")
        size = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
        height, width = pixel_values.shape[2:]
        if size[0] < 1 or size[1] < 1 or height % size[0] or width % size[1]:
            raise ValueError(
                f"patch_size {tuple(size)} does not divide the images "
                f"({height} x {width})"
            )
        self.pixel_values = pixel_values
        self.patch_size = (int(size[0]), int(size[1]))
        self.grid = (height // size[0], width // size[1])
        self.class_tokens = class_tokens
        self.baseline = torch.as_tensor(baseline, dtype=pixel_values.dtype)

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def mask_token_id(self) -> int:
        return self.class_tokens

    @property
    def tokens(self) -> TokenOptions:
        r"""The metrics' :class:`~captum_ext.metrics.TokenOptions`: the mask
        id as ``mask_token_id`` and ``pad_token_id``, the class tokens as
        ``special_token_ids``."""
        return TokenOptions(
            mask_token_id=self.mask_token_id,
            pad_token_id=self.mask_token_id,
            special_token_ids=tuple(range(self.class_tokens)),
        )

    @property
    def input_ids(self) -> Tensor:
        r"""``[batch, class_tokens + patches]``: every image's token ids."""
        batch, device = len(self.pixel_values), self.pixel_values.device
        first = self.class_tokens + 1
        patches = torch.arange(batch * self.num_patches, device=device) + first
        classes = torch.arange(self.class_tokens, device=device)
        return torch.cat(
            [
                classes.expand(batch, -1),
                patches.reshape(batch, self.num_patches),
            ],
            dim=1,
        )

    def pixels(
        self, input_ids: Tensor, attention_mask: Optional[Tensor] = None
    ) -> Tensor:
        r"""The images of rows of token ids ``[rows, pos]`` (any order of
        columns, padding anywhere), each patch whose id is absent or not
        attended set to the baseline: ``[rows, channels, height, width]``."""
        first = self.class_tokens + 1
        attended = torch.ones_like(input_ids, dtype=torch.bool)
        if attention_mask is not None:
            attended = attention_mask.bool()
        self._check_class_tokens(input_ids, attended)
        patch_ids = input_ids - first  # [rows, pos]
        present = attended & (patch_ids >= 0)
        image = self._image_of_rows(patch_ids, present)  # [rows]
        keep = torch.zeros(
            len(input_ids), self.num_patches, dtype=torch.bool, device=input_ids.device
        )
        rows = torch.arange(len(input_ids), device=input_ids.device)[:, None]
        index = torch.where(present, patch_ids % self.num_patches, 0)
        keep[rows.expand_as(index)[present], index[present]] = True
        on_pixels = keep.reshape(-1, *self.grid)
        on_pixels = on_pixels.repeat_interleave(self.patch_size[0], 1)
        on_pixels = on_pixels.repeat_interleave(self.patch_size[1], 2)
        images = self.pixel_values.to(input_ids.device)[image]
        baseline = self.baseline.to(images.device)
        return torch.where(on_pixels[:, None], images, baseline)

    def forward_func(
        self, forward_func: Callable[..., Tensor]
    ) -> Callable[..., Tensor]:
        r"""``f(input_ids, attention_mask=None, *rest) = forward_func(pixels,
        *rest)``: ``forward_func`` (pixel values -> logits ``[rows, C]``) on
        the images of token ids (:meth:`pixels`)."""

        def on_tokens(
            input_ids: Tensor, attention_mask: Optional[Tensor] = None, *rest: Any
        ) -> Tensor:
            return forward_func(self.pixels(input_ids, attention_mask), *rest)

        return on_tokens

    def _check_class_tokens(self, input_ids: Tensor, attended: Tensor) -> None:
        classes = torch.arange(self.class_tokens, device=input_ids.device)
        found = ((input_ids[..., None] == classes) & attended[..., None]).any(1)
        missing = (~found.all(1)).nonzero().flatten()
        if len(missing):
            raise ValueError(
                f"row(s) {missing.tolist()} lack a class token (ids 0 to "
                f"{self.class_tokens - 1}): a vision transformer cannot remove "
                "its class token(s); keep them among the special tokens "
                "(tokens=PatchTokens.tokens, protect='specials')"
            )

    def _image_of_rows(self, patch_ids: Tensor, present: Tensor) -> Tensor:
        r"""``[rows]``: the image each row's patches come from (0 for a row
        with every patch masked, whose pixels are all the baseline)."""
        images = torch.where(present, patch_ids // self.num_patches, -1)
        image = images.max(1).values
        mixed = (present & (images != image[:, None])).any(1)
        if bool(mixed.any()) or bool((image >= len(self.pixel_values)).any()):
            raise ValueError(
                "input_ids are not rows of PatchTokens.input_ids: a row holds "
                "patches of several images or an unknown id"
            )
        return image.clamp(min=0)
