"""slime.rollout.on_policy_distillation: slime's OPD reward and post-process.

Named with ``--custom-rm-path`` / ``--custom-reward-post-process-path`` (slime's OPD launch) or
called from your own code they do what slime's do, asking the teacher engine at ``--rm-url``;
with ``--opd-teacher-load`` the launch selects the native teacher instead (see
`slime_compat.distillation`):

- ``await reward_func(args, sample)``: the teacher server's SGLang answer for the sample's
  tokens (``args.rm_url``: its ``/generate``), with the log-prob of every token
  (``meta_info.input_token_logprobs``) and nothing generated;
- ``post_process_rewards(args, samples)``: each sample's ``teacher_log_probs`` (the teacher's
  log-probs of its response tokens, from that answer), and 0.0 rewards, as ``(raw, rewards)``.
"""

from __future__ import annotations

from slime.utils.http_utils import post
from slime.utils.processing_utils import encode_image_for_rollout_engine

__all__ = ["post_process_rewards", "reward_func"]


async def reward_func(args, sample, **kwargs) -> dict:
    """The teacher's answer for ``sample.tokens`` (its images too, for a multimodal sample)."""
    payload = {
        "input_ids": sample.tokens,
        "sampling_params": {"temperature": args.rollout_temperature, "max_new_tokens": 0, "skip_special_tokens": False},
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    images = (sample.multimodal_inputs or {}).get("images")
    if images:
        payload["image_data"] = [encode_image_for_rollout_engine(image) for image in images]
    return await post(args.rm_url, payload)


def post_process_rewards(args, samples, **kwargs) -> tuple[list[float], list[float]]:
    """Set each sample's ``teacher_log_probs`` from its reward (the teacher's answer); 0.0 rewards."""
    for sample in samples:
        entries = sample.get_reward_value(args)["meta_info"]["input_token_logprobs"][1:]
        sample.teacher_log_probs = [entry[0] for entry in entries][len(entries) - sample.response_length :]
    zeros = [0.0] * len(samples)
    return zeros, list(zeros)
