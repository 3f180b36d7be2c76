"""slime's on-policy distillation (OPD) launch, on this slime's native teacher.

slime's launch (``examples/on_policy_distillation/run-qwen3-8B-opd.sh``) starts a teacher
SGLang server and names ``--custom-rm-path slime.rollout.on_policy_distillation.reward_func``
(it posts each sample's tokens to the server at ``--rm-url`` for their log-probs),
``--custom-reward-post-process-path slime.rollout.on_policy_distillation.post_process_rewards``
(it keeps the response's as ``sample.teacher_log_probs`` and returns 0.0 rewards) and
``--use-opd --opd-kl-coef C`` (the KL penalty toward the teacher in the advantages).

Here those two functions select the native teacher: the train ranks compute the teacher's
log-probs themselves from ``--opd-teacher-load TEACHER_DIR`` (the checkpoint the ``--rm-url``
server serves, which is then not asked), with the same KL penalty, and every sample's reward
is 0.0 as slime's post-process makes it. A launch that names them without
``--opd-teacher-load`` is refused at config time, saying to add it.

A copy of slime's functions under another module path runs as written: its reward asks the
server at ``--rm-url`` (a ``slime engine serve TEACHER_DIR`` CPU engine answers it as SGLang
does), and the teacher log-probs its post-process sets are trained on only through
``--opd-teacher-load``: without it the run stops, naming the function
(`check_teacher_log_probs`), rather than train without the teacher.
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
ADD_TEACHER = (
    "add --opd-teacher-load TEACHER_DIR (the Hugging Face checkpoint your --rm-url teacher server serves) and "
    "--opd-kl-coef C: the train ranks compute the teacher's log-probs from it"
)


def opd_problems(config: Config, flag: str, path: str) -> list[str]:
    """Why slime's own OPD function ``path`` (given with ``flag``) cannot select the native teacher."""
    if config.get("opd_teacher_load") or (path == POST_PROCESS and config.get("custom_rm_path") == REWARD):
        return []  # the post-process's problem is the reward's, reported once
    return [
        f"{flag} {path}: slime's on-policy distillation asks a teacher SGLang server (--rm-url) for the "
        f"teacher's log-probs; here the run computes them itself: {ADD_TEACHER}"
    ]


def zero_reward(sample, config: Config) -> float:
    """The reward of slime's on-policy distillation: 0.0 (its learning signal is the teacher KL)."""
    return 0.0


def check_teacher_log_probs(samples, config: Config, source: str) -> None:
    """A `RunError` when ``source`` (a user's function) set ``sample.teacher_log_probs`` in a
    run without a teacher of its own: they would not be trained on."""
    from slime_core.faults.run_error import RunError

    if config.get("opd_teacher_load") or not any(getattr(s, "teacher_log_probs", None) is not None for s in samples):
        return
    raise RunError(
        f"{source} set sample.teacher_log_probs (slime's on-policy distillation), which this slime does not train "
        f"on from samples: {ADD_TEACHER} (the same teacher as your reward's server gives the same log-probs)"
    )
