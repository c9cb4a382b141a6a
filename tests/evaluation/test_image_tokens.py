#!/usr/bin/env python3
r"""ImageTokenizer: an image task's examples as patch token ids the engine
batches like texts, named tokens, the model on the images of the ids, and the
methods' pixels."""

import pytest
import torch
from captum_ext.evaluation.image_tokens import image_inputs, ImageTokenizer

from tests.helpers import tiny_vision


def test_examples_are_their_images_patch_tokens() -> None:
    torch.manual_seed(0)
    images = torch.randn(3, 3, 8, 8, dtype=torch.float64)
    tokenizer = ImageTokenizer(images, 4)
    encoded = tokenizer(ImageTokenizer.texts(3)[::-1], truncation=False)
    assert encoded["input_ids"] == [
        [0, 10, 11, 12, 13],
        [0, 6, 7, 8, 9],
        [0, 2, 3, 4, 5],
    ]
    assert tokenizer.model_max_length == 5
    assert tokenizer.all_special_ids == [0, 1] and tokenizer.pad_token_id == 1
    assert tokenizer.convert_ids_to_tokens([0, 1, 6, 9]) == [
        "[CLS]",
        "[MASK]",
        "0,0",
        "1,1",
    ]
    ids = torch.tensor([[0, 6, 7, 1, 9]])
    pixels = tokenizer.pixels(ids, torch.tensor([[1, 1, 0, 1, 1]]))
    expected = images[1].clone()
    expected[:, :4, 4:] = 0  # patch 0,1: not attended
    expected[:, 4:, :4] = 0  # patch 1,0: masked
    assert torch.equal(pixels[0], expected)
    with pytest.raises(ValueError, match="'image <i>'"):
        tokenizer(["a photo"])
    with pytest.raises(ValueError, match="text pairs"):
        tokenizer(["image 0"], ["image 1"])


def test_the_forward_and_the_methods_read_the_images() -> None:
    model = tiny_vision("vit")
    torch.manual_seed(0)
    images = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    tokenizer = ImageTokenizer(images, 4)
    ids = tokenizer.ids
    mask = torch.ones_like(ids)
    logits = tokenizer.forward_func(model)(ids, mask, None)
    assert torch.equal(logits, model(pixel_values=images).logits)
    inputs, args = image_inputs(tokenizer, ids, (mask,))
    assert torch.equal(inputs, images) and args is None
    assert image_inputs(object(), ids, (mask,)) == (ids, (mask,))
