"""The wire form of one weight bucket for ``POST /update_weights_from_tensor``.

A bucket is a list of ``(name, tensor)`` pairs with Hugging Face parameter names (as in
``model.named_parameters()``). On the wire it is the base64 text of ``torch.save(list)``
written into memory, one string per bucket. The trainer side (the client) encodes, the
engine decodes; both import this module so the two sides cannot drift apart.

Decoding uses ``torch.load(weights_only=True)``: a payload can carry tensors, names and
lists, never arbitrary pickled objects.
"""

from __future__ import annotations

import base64
import io

import torch


def encode_bucket(named_tensors: list[tuple[str, torch.Tensor]]) -> str:
    """Base64 text of ``torch.save(list[(name, tensor)])``; tensors are moved to CPU first."""
    pairs = [(name, tensor.detach().cpu()) for name, tensor in named_tensors]
    buffer = io.BytesIO()
    torch.save(pairs, buffer)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_bucket(payload: str) -> list[tuple[str, torch.Tensor]]:
    """The ``(name, tensor)`` pairs of one bucket made by :func:`encode_bucket`.

    Raises ``ValueError`` saying what is wrong when the text is not such a bucket.
    """
    try:
        raw = base64.b64decode(payload, validate=True)
        pairs = torch.load(io.BytesIO(raw), weights_only=True)
    except Exception as exc:  # binascii, pickle and torch raise many unrelated types
        raise ValueError(f"not a tensor bucket ({type(exc).__name__}: {exc}); "
                         "encode it with slime_sglang.tensor_payload.encode_bucket") from exc
    if not isinstance(pairs, list) or not all(_is_pair(pair) for pair in pairs):
        raise ValueError("a tensor bucket must hold a list of (name, tensor) pairs; "
                         "encode it with slime_sglang.tensor_payload.encode_bucket")
    return [(name, tensor) for name, tensor in pairs]


def _is_pair(pair) -> bool:
    return (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str)
            and isinstance(pair[1], torch.Tensor))
