"""The options of the rollout: prompt data, generation and rewards (core options;
`slime_core.config.core_options` declares them in help order).
"""

from __future__ import annotations

from slime_core.config.options import OptionSet


def data_options(o: OptionSet) -> None:
    g = "data"
    o.add("--prompt-data", required=True, help="JSONL or Parquet prompts; path@[start:end] uses a slice", group=g)
    o.add("--input-key", default="prompt", help="record key holding the prompt (text or chat messages)", group=g)
    o.add("--label-key", default="label", help="record key holding the label; '' for none", group=g)
    o.add("--metadata-key", default="metadata", help="record key holding per-sample metadata", group=g)
    o.add("--tool-key", default="tools", help="record key holding tool schemas for the chat template", group=g)
    o.add(
        "--apply-chat-template",
        type=bool,
        default=False,
        help="render prompts with the tokenizer's chat template",
        group=g,
    )
    o.add(
        "--apply-chat-template-kwargs",
        default="{}",
        help="JSON object of extra arguments to the chat template (slime's), e.g. '{\"enable_thinking\": false}'",
        group=g,
    )
    o.add(
        "--multimodal-keys",
        default=None,
        help="JSON object of media type -> record key holding that prompt's images or videos, e.g. '{\"image\": "
        '"images", "video": "videos"}\' (each fills an <image> / <video> placeholder of the prompt; a video is a list '
        "of frames; needs --apply-chat-template and a VLM's processor)",
        group=g,
    )
    o.add("--rollout-max-prompt-len", type=int, default=None, help="drop prompts longer than this many tokens", group=g)
    o.add(
        "--rollout-max-context-len",
        type=int,
        default=None,
        group=g,
        help="prompt plus response tokens a rollout may hold (slime's meaning): --rollout-max-prompt-len "
        "defaults to one less, so every kept prompt leaves room for a trained token",
    )
    o.add("--rollout-shuffle", type=bool, default=True, help="shuffle prompts each epoch", group=g)
    o.add("--rollout-seed", type=int, default=42, help="seed of the prompt order", group=g)
    o.add("--data-source", default="prompt", help="registered data source", group=g)
    o.add(
        "--buffer-filter", default="fifo", help="registered buffer filter: which partial groups go out first", group=g
    )
    o.add("--eval-prompt-data", nargs="+", default=None, help="NAME PATH pairs of evaluation prompts", group=g)
    o.add(
        "--eval-config",
        default=None,
        help="slime's YAML of evaluation datasets (eval: {defaults: {...}, datasets: [{name, path, ...}]}), each "
        "with its own keys, sampling and rm_type; replaces --eval-prompt-data",
        group=g,
    )
    for what in ("input", "label", "tool"):
        o.add(
            f"--eval-{what}-key",
            default=None,
            help=f"evaluation: record key of the {what} (default: --{what}-key)",
            group=g,
        )
    o.add(
        "--eval-max-prompt-len",
        type=int,
        default=None,
        help="evaluation: drop prompts longer than this many tokens (default: --eval-max-context-len minus 1, else "
        "--rollout-max-prompt-len)",
        group=g,
    )
    o.add(
        "--eval-max-context-len",
        type=int,
        default=None,
        help="evaluation: prompt plus response tokens a sample may hold (each response stops there)",
        group=g,
    )


def rollout_options(o: OptionSet) -> None:
    g = "rollout"
    o.add("--rollout-batch-size", type=int, required=True, help="prompt groups per rollout", group=g)
    o.add("--n-samples-per-prompt", type=int, default=1, help="responses generated per prompt (group size)", group=g)
    o.add("--rollout-max-response-len", type=int, default=1024, help="maximum new tokens per response", group=g)
    o.add("--rollout-temperature", type=float, default=1.0, help="sampling temperature", group=g)
    o.add(
        "--rollout-top-p",
        type=float,
        default=1.0,
        group=g,
        help="nucleus sampling threshold; below 1, training scores each token over the nucleus the engine drew it "
        "from, which the engine must return (the CPU engine does; SGLang needs slime's top-p patch)",
    )
    o.add("--rollout-top-k", type=int, default=-1, help="top-k sampling (-1: off)", group=g)
    o.add("--rollout-stop", nargs="+", default=None, help="stop strings", group=g)
    o.add(
        "--over-sampling-batch-size",
        type=int,
        default=None,
        help="prompt groups submitted at once (>= rollout batch)",
        group=g,
    )
    o.add("--partial-rollout", type=bool, default=False, help="continue aborted groups in a later rollout", group=g)
    o.add(
        "--mask-offpolicy-in-partial-rollout",
        type=bool,
        default=False,
        help="do not train on tokens a partial rollout made with older weights",
        group=g,
    )
    o.add(
        "--rollout-concurrency",
        type=int,
        default=512,
        help="samples being generated at once, per engine (each engine batches what it has; too few starve it)",
        group=g,
    )
    o.add(
        "--rollout-group-requests",
        type=bool,
        default=True,
        help="send a fresh group as one request for its n samples (sampling_params.n) when the default generate "
        "function is used; off: one request per sample",
        group=g,
    )
    o.add("--rollout-stop-token-ids", type=int, nargs="+", default=None, help="token ids that end a response", group=g)
    o.add(
        "--dynamic-sampling-max-groups",
        type=int,
        default=10,
        help="stop a rollout whose filter kept too few groups after this many x --rollout-batch-size were generated",
        group=g,
    )
    o.add(
        "--n-samples-per-eval-prompt",
        type=int,
        default=1,
        help="responses per evaluation prompt (pass@k uses them)",
        group=g,
    )
    o.add(
        "--eval-max-response-len",
        type=int,
        default=None,
        help="evaluation: maximum new tokens (default: the rollout's)",
        group=g,
    )
    o.add(
        "--eval-temperature",
        type=float,
        default=None,
        help="evaluation: sampling temperature (default: the rollout's)",
        group=g,
    )
    o.add(
        "--eval-top-p", type=float, default=None, help="evaluation: nucleus threshold (default: the rollout's)", group=g
    )
    o.add("--eval-top-k", type=int, default=None, help="evaluation: top-k (default: the rollout's)", group=g)
    o.add(
        "--eval-min-new-tokens",
        type=int,
        default=None,
        help="evaluation: the engine ends no response (EOS or stop token) before this many tokens",
        group=g,
    )
    o.add(
        "--skip-eval-before-train",
        type=bool,
        default=False,
        help="no evaluation before the first rollout (by default --eval-interval evaluates there too)",
        group=g,
    )
    o.add(
        "--rollout-backend",
        default="sglang",
        help="registered rollout backend: starts and controls the engines (slime-sglang: sglang)",
        group=g,
    )
    o.add(
        "--router",
        default="sglang",
        help="registered router in front of the engines (slime-router: sglang), or none: the engines in turn, no "
        "router process",
        group=g,
    )
    o.add("--rollout-function", default="default", help="registered rollout function", group=g)
    o.add(
        "--rollout-buffer-url",
        default=None,
        help="train on the trajectories of an external rollout buffer at this URL (slime's slime_plugins/"
        "rollout_buffer HTTP API); selects --rollout-function rollout_buffer",
        group=g,
    )
    o.add(
        "--rollout-task-type",
        default="math",
        help="the task the rollout buffer's generators run (its task_type; rewards here come from --rm-type)",
        group=g,
    )
    o.add(
        "--fetch-trajectory-retry-times",
        type=int,
        default=-1,
        help="failed requests to the rollout buffer retried per rollout (-1: without end)",
        group=g,
    )
    o.add("--generate-function", default="default", help="registered per-sample generate function", group=g)
    o.add(
        "--eval-function",
        default="default",
        help="registered evaluation function (used with --eval-prompt-data)",
        group=g,
    )
    o.add(
        "--dynamic-sampling-filter",
        default=None,
        help="registered filter that accepts or rejects whole groups",
        group=g,
    )
    o.add(
        "--sample-filter",
        nargs="+",
        default=None,
        help="registered filters that drop single samples from training",
        group=g,
    )
    o.add(
        "--sample-hook",
        nargs="+",
        default=None,
        group=g,
        help="registered hooks the default rollout applies, in order, to each sample it generates, before its reward",
    )
    o.add(
        "--all-groups-hook",
        nargs="+",
        default=None,
        group=g,
        help="registered hooks the default rollout calls with every group it generated, filtered-out ones included",
    )


def reward_options(o: OptionSet) -> None:
    g = "reward"
    o.add(
        "--rm-type", default=None, help="registered reward function (per-sample metadata['rm_type'] overrides)", group=g
    )
    o.add("--reward-key", default=None, help="key of a dict reward to train on", group=g)
    o.add("--eval-reward-key", default=None, help="evaluation: key of a dict reward (default: --reward-key)", group=g)
    o.add(
        "--log-reward-category",
        default=None,
        help="key of a dict reward holding a category (e.g. why it failed): each category's share of the samples "
        "is logged as rollout/error_cat/<category> (and eval/<name>/error_cat/<category>)",
        group=g,
    )
    o.add("--group-rm", type=bool, default=False, help="the reward function scores a whole group at once", group=g)
    o.add("--rm-timeout", type=float, default=30.0, help="seconds one reward call may take", group=g)
    o.add("--rm-max-concurrency", type=int, default=64, help="reward calls in flight at once", group=g)
    o.add(
        "--rm-failure-reward",
        type=float,
        default=None,
        help="reward for samples whose reward call failed (default: drop them)",
        group=g,
    )
    o.add(
        "--drop-nonfinite-rewards",
        type=bool,
        default=False,
        group=g,
        help="a reward that is NaN or infinite fails its sample, as one whose reward call raised (counted in "
        "reward/non_finite), instead of stopping the run with an error naming the function and the sample",
    )
    o.add(
        "--reward-post-process",
        default=None,
        group=g,
        help="registered reward post-processor: fn(samples, config) -> (raw_rewards, rewards); the rewards are "
        "trained on as they are, instead of the estimator's group normalisation, and the raw ones are logged",
    )
