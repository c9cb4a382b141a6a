#!/usr/bin/env python3
r"""The tied input-embedding decoder of
:class:`~captum_ext.attr.DecodedLayerAttribution`: hidden states onto vocabulary
logits through the model's own word embeddings."""

from torch import nn, Tensor

from captum_ext.adapters import get_adapter, read_parameter, UnsupportedModelError

__all__ = ["EmbeddingDecoder"]


class EmbeddingDecoder(nn.Module):
    r"""The tied input-embedding decoder ``h -> h @ E^T`` (no bias), ``E`` being the
    model's word-embedding matrix ``[vocab, d]``.

    Args:
        model (nn.Module): a Hugging Face model; its word embeddings must have the
            hidden size (not so for ALBERT/ELECTRA's factorised embeddings).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        adapter = get_adapter(model)
        # Held outside this decoder's module tree, so that the model's embedding
        # module (its mode, its hooks) stays the model's own.
        self._embeddings = (adapter.word_embeddings(),)
        width = self._embeddings[0].weight.shape[1]
        if width != adapter.hidden_size:
            raise UnsupportedModelError(
                f"{adapter.family_name}: word embeddings have size {width} but hidden "
                f"states {adapter.hidden_size}, so h @ E^T is undefined; use the "
                "MLM head or a fitted decoder (load_fitted_decoder)"
            )
        self.eval()

    @property
    def weight(self) -> Tensor:  # [vocab, d]
        r"""``E``, read when used: through accelerate's hook where the model's
        embeddings are offloaded (their parameter then holds no data)."""
        weight = read_parameter(self._embeddings[0], "weight")
        assert weight is not None  # an nn.Embedding
        return weight

    def forward(self, hidden: Tensor) -> Tensor:
        return hidden @ self.weight.T  # [..., d] -> [..., vocab]
