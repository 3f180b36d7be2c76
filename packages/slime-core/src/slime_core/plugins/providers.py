"""Which of slime's own packages provides a component or an option, for the errors a user
sees when that package is not installed: they say what to ``pip install`` instead of only
"unknown". Names a third-party plugin provides are not listed; their errors list what is
installed."""

from __future__ import annotations

_REWARDS = ("exact_match", "math", "dapo", "deepscaler", "f1", "gpqa", "multiple_choice", "code", "remote")

#: (registry kind, name) -> the distribution that registers it
COMPONENTS: dict[tuple[str, str], str] = {
    ("train_backends", "fsdp"): "slime-fsdp",
    ("train_backends", "megatron"): "slime-megatron",
    ("critics", "fsdp"): "slime-fsdp",
    ("rollout_backends", "sglang"): "slime-sglang",
    ("rollout_engines", "sglang"): "slime-sglang",
    ("rollout_engines", "cpu"): "slime-sglang",
    ("rollout_functions", "default"): "slime-sglang",
    ("generate_functions", "default"): "slime-sglang",
    ("eval_functions", "default"): "slime-sglang",
    ("routers", "sglang"): "slime-router",
    **{("router_middlewares", name): "slime-router" for name in ("sessions", "metrics", "retry")},
    **{("reward_functions", name): "slime-rewards" for name in _REWARDS},
    **{("reward_functions", f"boxed_{name}"): "slime-rewards" for name in _REWARDS},
    **{("group_filters", name): "slime-rewards" for name in ("nonzero_std", "nonzero_std_unless_scarce")},
    **{("sample_filters", name): "slime-rewards" for name in ("drop_truncated", "drop_over_length")},
}

#: option key -> the distribution that declares it
OPTIONS: dict[str, str] = {
    **dict.fromkeys(("rollout_engine", "rollout_external_engine_addrs"), "slime-sglang"),
    **dict.fromkeys(("router_middleware", "sglang_router_ip", "sglang_router_port", "router_middleware_retries",
                     "router_middleware_timeout"), "slime-router"),
    **dict.fromkeys(("rm_url", "rm_request_timeout", "rm_max_retries", "rm_retry_backoff", "math_timeout",
                     "code_timeout", "code_memory_mb", "sample_filter_max_tokens"), "slime-rewards"),
}


def not_installed(what: str, distribution: str) -> str:
    return f"{what} comes with {distribution}, which is not installed: pip install {distribution}"
