"""A GPTModel with multi-token prediction (MTP) layers whose outputs never reach the policy.

megatron-core 0.16's GPTModel with MTP layers needs labels in every forward and then returns
per-token losses, with the MTP loss hidden in the backward pass (``MTPLossAutoScaler``) and
logged through a CUDA-only tracker. The backend needs logits: log-probs, entropy and the RL
losses are computed from them (`slime_megatron.logprobs`). :class:`MTPGPTModel` is that
GPTModel with its own post-processing:

- by default, and in every forward without gradients (log-prob passes), it returns the main
  head's logits (B, S, V/tp) and does not run the MTP layers: the log-probs are those of the
  model without MTP layers;
- with ``train_mtp`` set, a training forward with gradients also runs the MTP layers and
  returns every depth's logits along the sequence, (B, (1 + D)·S, V/tp): depth k's (0: the
  main head) at columns [k·S, (k+1)·S), where position t predicts token t + 1 + k
  (`slime_megatron.mtp_loss` turns them into the MTP loss).

Importing this module imports megatron.
"""

from __future__ import annotations

import torch
from megatron.core.models.gpt import GPTModel


class MTPGPTModel(GPTModel):
    """megatron-core's GPTModel whose MTP layers run only when they are trained (see the module docstring)."""

    train_mtp: bool = False  # run the MTP layers in training forwards (--enable-mtp-training)

    def _postprocess(
        self,
        hidden_states,
        input_ids,
        position_ids,
        labels,
        rotary_pos_emb,
        rotary_pos_cos,
        rotary_pos_sin,
        mtp_in_postprocess=None,
        loss_mask=None,
        decoder_input=None,
        attention_mask=None,
        inference_params=None,
        packed_seq_params=None,
        sequence_len_offset=None,
        runtime_gather_output=None,
        extra_block_kwargs=None,
        inference_context=None,
    ):
        if labels is not None or inference_context is not None:
            raise NotImplementedError("MTPGPTModel returns logits: it takes no labels and no inference context")
        if not self.post_process:
            return hidden_states
        depths = [hidden_states]
        if mtp_in_postprocess and self.train_mtp and self.training and torch.is_grad_enabled():
            stacked = self.mtp(
                input_ids=input_ids,
                position_ids=position_ids,
                hidden_states=hidden_states,
                attention_mask=attention_mask,
                rotary_pos_emb=rotary_pos_emb,
                rotary_pos_cos=rotary_pos_cos,
                rotary_pos_sin=rotary_pos_sin,
                packed_seq_params=packed_seq_params,
                sequence_len_offset=sequence_len_offset,
                embedding=self.embedding,
                **(extra_block_kwargs or {}),
            )
            depths = stacked.chunk(1 + len(self.mtp.layers), dim=0)  # (S, B, H) each, sequence first
        weight = self.shared_embedding_or_output_weight() if self.share_embeddings_and_output_weights else None
        logits = [self.output_layer(h, weight=weight, runtime_gather_output=runtime_gather_output)[0] for h in depths]
        return torch.cat(logits).transpose(0, 1).contiguous()
