"""`WeightBucket`: one bucket of exported weights, as safetensors bytes.

A train rank exports its weights in Hugging Face names, a bucket at a time, for the rollout
engines. The bucket travels as the bytes of a safetensors file (a JSON header of names,
dtypes and shapes, then the raw data): through Ray from the rank to the driver, and from
there as the body of an engine's ``/update_weights_from_tensor`` (see
``slime_sglang.tensor_payload``).

Bytes rather than tensors because Ray pickles a CPU tensor through ``torch.save`` (a 3.2 MB
bucket of 46 tensors took ~20 ms from the rank to the driver), while bytes pass as one
buffer; and the engine's wire form is the same bytes, so the driver sends them as they are.
Reading them back can only ever produce tensors, never run pickled code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no torch import here: a run's config checks import this module before Ray starts
    import torch

    NamedTensors = list[tuple[str, torch.Tensor]]


class WeightBucket:
    """``(name, tensor)`` pairs held as safetensors bytes; iterate it for the pairs."""

    def __init__(self, data: bytes):
        self.data = data

    @classmethod
    def of(cls, bucket: WeightBucket | NamedTensors) -> WeightBucket:
        """``bucket`` itself, or its pairs packed (`pack`)."""
        return bucket if isinstance(bucket, WeightBucket) else cls.pack(bucket)

    @classmethod
    def pack(cls, named_tensors: NamedTensors) -> WeightBucket:
        """The bucket of ``named_tensors`` (moved to CPU; tied tensors may share memory).

        Raises ``ValueError`` when a name occurs twice: a bucket maps each name to one tensor.
        """
        from safetensors.torch import save

        tensors = {}
        storages: set[int] = set()
        for name, tensor in named_tensors:
            if name in tensors:
                raise ValueError(f"parameter {name!r} occurs twice in one weight bucket; export each name once")
            tensor = tensor.detach().cpu().contiguous()
            storage = tensor.untyped_storage().data_ptr()
            # safetensors refuses tensors that share memory (tied weights exported under both names)
            tensors[name] = tensor.clone() if storage in storages else tensor
            storages.add(storage)
        return cls(save(tensors))

    def tensors(self) -> NamedTensors:
        """The ``(name, tensor)`` pairs (new CPU tensors)."""
        from safetensors.torch import load

        return list(load(self.data).items())

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(self.tensors())

    @property
    def nbytes(self) -> int:
        """Bytes on the wire (the tensors' bytes plus a small header)."""
        return len(self.data)
