"""slime's on-policy distillation (OPD) launch: the teacher engine at ``--rm-url``, or the native teacher.

slime's launch (``examples/on_policy_distillation/run-qwen3-8B-opd.sh``) starts a teacher
SGLang server and names ``--custom-rm-path slime.rollout.on_policy_distillation.reward_func``
(it posts each sample's tokens to the server at ``--rm-url`` for their log-probs),
``--custom-reward-post-process-path slime.rollout.on_policy_distillation.post_process_rewards``
(it keeps the response's as ``sample.teacher_log_probs`` and returns 0.0 rewards) and
``--use-opd --opd-kl-coef C`` (the KL penalty toward the teacher in the advantages).

Two routes give the same numbers for the same teacher weights:

- **the teacher engine (slime's)**: with ``--rm-url`` and no ``--opd-teacher-load`` the two
  functions run as slime's do (`slime.rollout.on_policy_distillation`, or a user's copy): the
  teacher answers at ``--rm-url`` (an SGLang server, or ``slime engine serve TEACHER_DIR``), and
  the ``teacher_log_probs`` the post-process sets travel with the samples to the train ranks,
  which subtract ``--opd-kl-coef`` × the reverse KL from the advantages
  (`slime_core.rank.step.RankStep.tensors`);
- **the native teacher**: with ``--opd-teacher-load TEACHER_DIR`` slime's own two functions
  select it: the train ranks compute the teacher's log-probs themselves (the server at
  ``--rm-url`` is not asked) and every reward is 0.0, as slime's post-process makes it.

Without either, the launch is refused at config time, naming both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slime_core.config.config import Config

MODULE = "slime.rollout.on_policy_distillation"
REWARD = f"{MODULE}.reward_func"
POST_PROCESS = f"{MODULE}.post_process_rewards"
#: the native reward slime's OPD reward selects: 0.0, what slime's post-process returns
ZERO_REWARD = "slime.opd_zero_reward"
#: slime's OPD function -> what it selects with the native teacher (None: no post-process)
NATIVE: dict[str, str | None] = {REWARD: ZERO_REWARD, POST_PROCESS: None}


def uses_native_teacher(config: Config, path: str) -> bool:
    """Whether slime's own OPD function ``path`` selects the native teacher (``--opd-teacher-load``)."""
    return path in NATIVE and bool(config.get("opd_teacher_load"))


def opd_problems(config: Config, flag: str, path: str) -> list[str]:
    """Why slime's own OPD function ``path`` (given with ``flag``) has no teacher to ask."""
    if path not in NATIVE or config.get("opd_teacher_load") or config.get("rm_url"):
        return []
    if path == POST_PROCESS and config.get("custom_rm_path") == REWARD:
        return []  # the post-process's problem is the reward's, reported once
    return [
        f"{flag} {path}: slime's on-policy distillation asks a teacher for the log-probs of each sample, and this "
        "launch names none: give --rm-url http://HOST:PORT/generate (a running SGLang server, or `slime engine "
        "serve TEACHER_DIR`), or --opd-teacher-load TEACHER_DIR to have the train ranks compute them"
    ]


def zero_reward(sample, config: Config) -> float:
    """The reward of slime's on-policy distillation: 0.0 (its learning signal is the teacher KL)."""
    return 0.0
