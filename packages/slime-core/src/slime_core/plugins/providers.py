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
    ("routers", "sglang"): "slime-router",
    **{("router_middlewares", name): "slime-router" for name in ("sessions", "metrics", "retry")},
    **{("reward_functions", name): "slime-rewards" for name in _REWARDS},
    **{("reward_functions", f"boxed_{name}"): "slime-rewards" for name in _REWARDS},
    **{("group_filters", name): "slime-rewards" for name in ("nonzero_std", "nonzero_std_unless_scarce")},
    **{("sample_filters", name): "slime-rewards" for name in ("drop_truncated", "drop_over_length")},
    **{
        (kind, f"slime.{name}"): "slime-compat"
        for kind, name in (
            ("reward_functions", "custom_rm"),
            ("generate_functions", "custom_generate"),
            ("rollout_functions", "rollout_function"),
            ("eval_functions", "eval_function"),
            ("group_filters", "dynamic_sampling_filter"),
            ("buffer_filters", "buffer_filter"),
            ("data_sources", "data_source"),
        )
    },
}

#: option key -> the distribution that declares it
OPTIONS: dict[str, str] = {
    **dict.fromkeys(("rollout_engine", "rollout_external_engine_addrs"), "slime-sglang"),
    **dict.fromkeys(
        (
            "router_middleware",
            "sglang_router_ip",
            "sglang_router_port",
            "router_middleware_retries",
            "router_middleware_timeout",
        ),
        "slime-router",
    ),
    **dict.fromkeys(
        (
            "rm_url",
            "rm_request_timeout",
            "rm_max_retries",
            "rm_retry_backoff",
            "math_timeout",
            "code_timeout",
            "code_memory_mb",
            "code_sample_timeout",
            "code_isolation",
            "sample_filter_max_tokens",
        ),
        "slime-rewards",
    ),
    # slime's function flags (slime-compat's hooks.HOOKS; run slime's plugin code unchanged)
    **dict.fromkeys(
        (
            "custom_rm_path",
            "custom_generate_function_path",
            "rollout_function_path",
            "eval_function_path",
            "dynamic_sampling_filter_path",
            "buffer_filter_path",
            "data_source_path",
            "custom_rollout_log_function_path",
            "custom_eval_rollout_log_function_path",
            "rollout_sample_hook_path",
            "rollout_sample_filter_path",
            "rollout_all_samples_process_path",
            "custom_reward_post_process_path",
            "custom_convert_samples_to_train_data_path",
            "rollout_data_postprocess_path",
            "custom_advantage_function_path",
            "custom_loss_function_path",
            "custom_tis_function_path",
            "custom_pg_loss_reducer_function_path",
            "custom_megatron_init_path",
            "custom_megatron_before_log_prob_hook_path",
            "custom_megatron_before_train_step_hook_path",
            "custom_model_provider_path",
            "custom_update_weight_post_write_path",
            "custom_config_path",
        ),
        "slime-compat",
    ),
}


def not_installed(what: str, distribution: str) -> str:
    return f"{what} comes with {distribution}, which is not installed: pip install {distribution}"
