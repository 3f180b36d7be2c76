"""slime's Megatron-side function flags on the Megatron backend: a real ``slime run`` (one rank,
tiny Qwen3, CPU engine) with slime-style functions (`slime_style_megatron_hooks`), what they
were given and what their changes did; the provider check; the refusal with another backend."""

import json
import os
from pathlib import Path

import pytest

from slime_core.config import ConfigError

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
H = "slime_style_megatron_hooks."
LR = 1e-3


def _calls(path: Path) -> dict[str, list[dict]]:
    calls: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        calls.setdefault(record.pop("hook"), []).append(record)
    return calls


@pytest.fixture(scope="module")
def hooked_run(ray_cluster, tiny_model_dir, tmp_path_factory):
    """Two rollouts of two optimizer steps each, with a KL loss (so a reference pass), an entropy
    bonus (so every step has a gradient, even when all rewards are equal) and disk weight
    updates, every Megatron-side slime flag given; the run's hook calls and metrics."""
    from slime_core.cli.run import run_command
    from slime_core.loop.run_dir import read_metrics
    from slime_core.plugins import Plugins

    tmp = tmp_path_factory.mktemp("megatron-hooks")
    data = tmp / "addition.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "label": str(a + b)}) + "\n" for a in range(3) for b in range(3))
    )
    out = tmp / "run"
    flags = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--train-backend",
        "megatron",
        "--rollout-engine",
        "cpu",
        "--rm-type",
        "exact_match",
        "--num-rollout",
        "2",
        "--rollout-batch-size",
        "2",
        "--n-samples-per-prompt",
        "2",
        "--num-steps-per-rollout",
        "2",
        "--rollout-max-response-len",
        "4",
        "--lr",
        str(LR),
        "--entropy-coef",
        "0.01",
        "--use-kl-loss",
        "--use-rollout-entropy",
        "--update-weight-transport",
        "disk",
        "--output-dir",
        str(out),
        "--custom-megatron-init-path",
        H + "megatron_init",
        "--custom-model-provider-path",
        H + "model_provider",
        "--custom-megatron-before-log-prob-hook-path",
        H + "before_log_prob",
        "--custom-megatron-before-train-step-hook-path",
        H + "before_train_step",
        "--rollout-data-postprocess-path",
        H + "rollout_data_postprocess",
        "--custom-update-weight-post-write-path",
        H + "post_write",
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(HERE), prepend=os.pathsep)  # the train ranks import H from here
        assert run_command(flags, Plugins()) == 0
    metrics = [r for r in read_metrics(out / "metrics.jsonl") if r["rollout_id"] >= 0]
    return _calls(out / "hook_calls.jsonl"), metrics


def test_init_runs_once_megatron_is_initialised_and_before_the_custom_provider_builds_the_model(hooked_run):
    calls, _ = hooked_run
    assert list(calls)[:2] == ["init", "provider"]  # in the order of their first calls
    assert calls["init"] == [{"parallel_ready": True, "tp": 1, "pp": 1}]
    assert calls["provider"] == [{"pre_process": True, "post_process": True, "vp_stage": None}]


def test_log_prob_hook_gets_the_model_chunks_of_each_pass_with_slime_store_prefixes(hooked_run):
    calls, _ = hooked_run
    assert [c["store_prefix"] for c in calls["log_prob"]] == ["", "ref_"] * 2  # π_old then the reference, per rollout
    assert all(c["chunks"] == ["DistributedDataParallel"] and c["megatron_modules"] for c in calls["log_prob"])
    assert all(c["custom_provider"] for c in calls["log_prob"])  # the provider's model is the one trained


def test_train_step_hook_sees_every_step_and_its_learning_rate_change_takes_effect(hooked_run):
    calls, metrics = hooked_run
    steps = calls["train_step"]
    assert [(c["rollout_id"], c["step_id"]) for c in steps] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(c["chunks"] == 1 and c["megatron_optimizer"] and c["scheduler"] == "None" for c in steps)
    assert steps[0]["fingerprint"] != steps[1]["fingerprint"]  # step (0, 0) trained
    assert steps[1]["fingerprint"] == steps[2]["fingerprint"]  # step (0, 1) ran at the hook's learning rate 0
    assert metrics[0]["train/lr"] == pytest.approx((LR + 0.0) / 2)  # the rollout's steps averaged


def test_rollout_data_postprocess_gets_slime_rollout_data_and_its_loss_masks_are_trained_on(hooked_run):
    calls, metrics = hooked_run
    assert [c["rollout_id"] for c in calls["postprocess"]] == [0, 1]
    for call in calls["postprocess"]:
        assert {
            "tokens",
            "loss_masks",
            "advantages",
            "log_probs",
            "ref_log_probs",
            "rollout_log_probs",
            "response_lengths",
            "total_lengths",
            "rewards",
        } <= set(call["keys"])
        assert call["samples"] == 4 and call["mask_lengths_match"]
    for call, record in zip(calls["postprocess"], metrics):  # --use-rollout-entropy: π_old's and π_ref's, per token
        for key, logged in (("entropy", "train/rollout_entropy"), ("ref_entropy", "train/rollout_ref_entropy")):
            entropy = call["entropy"][key]
            assert [len(e) for e in entropy] == call["response_lengths"] and len(entropy) == 4
            tokens = [h for e in entropy for h in e]
            assert sum(tokens) / len(tokens) == pytest.approx(record[logged], abs=1e-5)
    assert metrics[0]["train/grad_norm"] > 0
    assert metrics[1]["train/grad_norm"] == 0.0  # rollout 1's masks were zeroed by the function


def test_post_write_hook_runs_after_each_disk_weight_update_is_complete(hooked_run):
    calls, metrics = hooked_run
    writes = calls["post_write"]
    assert [Path(c["version_dir"]).name for c in writes] == ["v0000001", "v0000002"]
    assert all(c["has_config"] and c["has_weights"] and c["rollout_engines"] == [] for c in writes)
    assert [r["weight_version"] for r in metrics] == [1, 2]


def _check_provided_models(rank, sizes, tiny_configs):
    """The errors for models that do not fit the tiny Qwen3: one a layer short, one of another
    architecture (Qwen2: qkv biases, no q/k norms, untied output layer), one not a model."""
    from slime_megatron.models import build_model
    from slime_megatron.models.provider import check_provided_model

    qwen3, short, qwen2 = tiny_configs
    errors = []
    for model in (build_model(short, sizes), build_model(qwen2, sizes), object()):
        try:
            check_provided_model(model, qwen3, "my_models:provider")
        except (TypeError, ValueError) as exc:
            errors.append(str(exc))
    return errors


def test_a_provided_model_that_does_not_take_the_checkpoint_is_refused_saying_what_differs(run_ranks, tiny_hf):
    short = tiny_hf.config("qwen3")
    short.num_hidden_layers = 1
    configs = (tiny_hf.config("qwen3"), short, tiny_hf.config("qwen2"))
    fewer_layers, other_architecture, not_a_model = run_ranks(_check_provided_models, 1, configs)[0]
    where = "--megatron-model-provider my_models:provider returned"
    assert fewer_layers == (
        f"{where} a model with num_layers 1 (the run has 2); build its TransformerConfig from "
        "--hf-checkpoint's config.json and the run's parallel sizes"
    )
    assert other_architecture.startswith(f"{where} a model the qwen3 weights of --hf-checkpoint do not fit")
    assert "decoder.layers.0.self_attention.linear_qkv.bias" in other_architecture  # Qwen2's, not Qwen3's
    assert "q_layernorm" in other_architecture and "register_family" in other_architecture
    assert not_a_model.startswith(f"{where} object, not a megatron-core model")


def _dry_run_config(tmp_path, *flags):
    from slime_core.cli.run import run_problems
    from slime_core.config import OptionSet, load_config
    from slime_core.plugins import Plugins

    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    plugins, options = Plugins(), OptionSet()
    plugins.add_options(options)
    argv = [
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        "unused",
        "--rollout-batch-size",
        "2",
        "--n-samples-per-prompt",
        "2",
        "--global-batch-size",
        "4",
        "--dry-run",
        *flags,
    ]
    return load_config(argv, options, plugins, checks=lambda c: run_problems(c, plugins))


SLIME_FLAGS = (
    "--custom-megatron-init-path",
    "--custom-megatron-before-log-prob-hook-path",
    "--custom-megatron-before-train-step-hook-path",
    "--custom-model-provider-path",
    "--rollout-data-postprocess-path",
    "--custom-update-weight-post-write-path",
)


def test_with_the_fsdp_backend_every_megatron_flag_is_a_config_error_naming_the_megatron_backend(tmp_path):
    with pytest.raises(ConfigError) as error:
        _dry_run_config(
            tmp_path,
            "--train-backend",
            "fsdp",
            *(arg for flag in SLIME_FLAGS for arg in (flag, H + "x")),
            "--megatron-before-train-step-hook",
            "my_hooks:before_step",
        )
    lines = str(error.value).splitlines()[1:]
    assert len(lines) == len(SLIME_FLAGS) + 1
    for flag in SLIME_FLAGS:
        assert (
            f"  - {flag}: slime calls it in its Megatron actor, and only the Megatron backend calls it here; "
            "--train-backend fsdp would never run it: use --train-backend megatron, or drop the flag" in lines
        )
    assert (
        "  - --megatron-before-train-step-hook is called by the Megatron backend's train ranks, and --train-backend "
        "fsdp never calls it; use --train-backend megatron, or drop the flag" in lines
    )


def test_a_slime_megatron_flag_without_a_backend_picks_megatron_as_slime_would(tmp_path):
    """slime's default backend is Megatron; the choice is made before any plugin's check runs,
    whatever order the plugins load in."""
    config = _dry_run_config(tmp_path, "--custom-megatron-init-path", H + "megatron_init")
    assert config.train_backend == "megatron"
    assert config.sources["train_backend"] == "chosen by --custom-megatron-init-path (slime's default backend)"
    assert config.megatron_init_hook == "slime_compat.megatron_hooks:megatron_init"


def test_with_the_megatron_backend_the_flags_select_the_adapters_unless_the_native_option_or_transport_conflicts(
    tmp_path,
):
    config = _dry_run_config(
        tmp_path, "--train-backend", "megatron", "--custom-megatron-init-path", H + "megatron_init"
    )
    assert config.megatron_init_hook == "slime_compat.megatron_hooks:megatron_init"
    with pytest.raises(ConfigError, match="--custom-megatron-init-path and --megatron-init-hook both name"):
        _dry_run_config(
            tmp_path,
            "--train-backend",
            "megatron",
            "--custom-megatron-init-path",
            H + "megatron_init",
            "--megatron-init-hook",
            "my_hooks:init",
        )
    with pytest.raises(ConfigError, match="by tensor, which writes no files; add --update-weight-transport disk"):
        _dry_run_config(
            tmp_path,
            "--train-backend",
            "megatron",
            "--update-weight-transport",
            "tensor",
            "--custom-update-weight-post-write-path",
            H + "post_write",
        )
    with pytest.raises(
        ConfigError, match="by the default transport .tensor or broadcast.; add --update-weight-transport disk"
    ):
        _dry_run_config(tmp_path, "--train-backend", "megatron", "--megatron-weights-written-hook", "my_hooks:written")
    deepgemm = "slime.backends.megatron_utils.alignment.deepgemm_forward.enable_deepgemm_all_forward_before_train_step"
    with pytest.raises(ConfigError, match="slime's Megatron layers to DeepGEMM kernels; .* drop the flag"):
        _dry_run_config(
            tmp_path, "--train-backend", "megatron", "--custom-megatron-before-train-step-hook-path", deepgemm
        )
