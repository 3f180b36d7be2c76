"""The wire form of one weight bucket for ``POST /update_weights_from_tensor``.

A bucket is a list of ``(name, tensor)`` pairs with Hugging Face parameter names (as in
``model.named_parameters()``), or a `slime_core.rank.weight_bucket.WeightBucket` holding them as
safetensors bytes, as the train ranks export them. On the wire it is the base64 text of
those bytes in SGLang's JSON body (one string per bucket), or, as `EngineClient` sends it,
the bytes themselves as the body (``application/octet-stream``, the other fields in the
query): base64 cost 15 ms per 3.2 MB bucket (5 to encode, 10 to decode) and the JSON
around it 3 more. The trainer side (the client) encodes, the engine decodes; both import
this module so the two sides cannot drift apart.

Safetensors rather than ``torch.save``: writing and reading it is a copy of the bytes (a
3.2 MB bucket: 4 ms to encode and 1 ms to decode, where ``torch.save``/``torch.load`` took
26-40 ms and 25 ms), and decoding can only ever produce tensors, never run pickled code.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from slime_core.rank.weight_bucket import WeightBucket

if TYPE_CHECKING:
    from slime_core.rank.weight_bucket import NamedTensors


def encode_bucket(bucket: WeightBucket | NamedTensors) -> str:
    """Base64 text of the bucket's safetensors bytes (pairs are packed first, see
    `WeightBucket.pack`, which refuses a name given twice)."""
    return base64.b64encode(WeightBucket.of(bucket).data).decode("ascii")


def decode_bucket(payload: str | bytes) -> NamedTensors:
    """The ``(name, tensor)`` pairs of one bucket: the text :func:`encode_bucket` made, or the
    bucket's bytes themselves (`WeightBucket.data`, the raw body form of the update).

    Raises ``ValueError`` saying what is wrong when the payload is not such a bucket.
    """
    try:  # no validate=True: its regex check took 3/4 of the decode; safetensors checks the result
        return WeightBucket(payload if isinstance(payload, bytes) else base64.b64decode(payload)).tensors()
    except Exception as exc:  # binascii and safetensors raise unrelated types
        raise ValueError(
            f"not a tensor bucket ({type(exc).__name__}: {exc}); "
            "encode it with slime_sglang.tensor_payload.encode_bucket"
        ) from exc
