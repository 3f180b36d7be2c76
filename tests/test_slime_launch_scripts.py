"""Launch scripts written the way slime's users write them (bash arrays of flags, Megatron-LM
``MODEL_ARGS`` included), with ``python3 train.py`` replaced by ``slime run``: they parse, the
architecture flags are checked against the model, flags without effect are listed.

bash expands the script's arrays; its ``slime`` command hands the words to ``slime run`` in
this process (a subprocess would import torch again for every script)."""

import json
import subprocess
from pathlib import Path

import pytest

from slime_core.cli.run import run_command
from slime_core.config import OptionSet, load_config
from slime_core.plugins import Plugins
from slime_core.preflight import preflight_problems

SCRIPT = """#!/bin/bash
set -e
slime() {{ printf '%s\\0' "$@" > "$SLIME_ARGV"; }}
MODEL_ARGS=(
   --swiglu --num-layers {layers} --hidden-size {hidden} --ffn-hidden-size {ffn}
   --num-attention-heads {heads} --group-query-attention --num-query-groups {kv_heads}
   --normalization RMSNorm --qk-layernorm --disable-bias-linear --rotary-base {rope_theta}
   --vocab-size {vocab} --kv-channels {head_dim} --use-rotary-position-embeddings
)
CKPT_ARGS=(--hf-checkpoint {model} --ref-load {model} --load {ckpt} --save {ckpt} --save-interval 20)
ROLLOUT_ARGS=(
   --prompt-data {data} --input-key prompt --label-key label --rollout-shuffle --rm-type math
   --num-rollout 3 --rollout-batch-size 4 --n-samples-per-prompt 2 --rollout-max-response-len 16
   --rollout-temperature 1 --global-batch-size 8 --balance-data
)
PERF_ARGS=(
   --tensor-model-parallel-size {tp} --sequence-parallel --pipeline-model-parallel-size 1
   --context-parallel-size 1 --recompute-granularity full --recompute-method uniform
   --recompute-num-layers 1 --use-dynamic-batch-size --max-tokens-per-gpu 4096
)
GRPO_ARGS=(--advantage-estimator grpo --use-kl-loss --kl-loss-coef 0.00 --kl-loss-type low_var_kl
   --entropy-coef 0.00 --eps-clip 0.2 --eps-clip-high 0.28)
OPTIMIZER_ARGS=(--optimizer adam --lr 1e-6 --lr-decay-style constant --weight-decay 0.1
   --adam-beta1 0.9 --adam-beta2 0.98)
SGLANG_ARGS=(--rollout-num-gpus-per-engine 1 --sglang-mem-fraction-static 0.7
   --sglang-cuda-graph-bs 1 2 4 8 16)
MISC_ARGS=(--attention-dropout 0.0 --hidden-dropout 0.0 --accumulate-allreduce-grads-in-fp32
   --attention-softmax-in-fp32 --attention-backend flash)
slime run {entry} --dry-run --actor-num-nodes 1 --actor-num-gpus-per-node 2 {extra} \\
   ${{MODEL_ARGS[@]}} ${{CKPT_ARGS[@]}} ${{ROLLOUT_ARGS[@]}} ${{OPTIMIZER_ARGS[@]}} ${{GRPO_ARGS[@]}} \\
   ${{PERF_ARGS[@]}} ${{SGLANG_ARGS[@]}} ${{MISC_ARGS[@]}}
"""


@pytest.fixture
def launch(tiny_model_dir, tmp_path, capsys):
    """``launch(entry="", extra="", tp=1, **model_overrides)`` writes a slime-style launch script
    for the tiny Qwen3 and runs it; returns (exit status, stdout, stderr) of its ``slime run``."""
    model = json.loads((Path(tiny_model_dir) / "config.json").read_text())
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")

    def run(entry="", extra="", tp=1, **overrides):
        rope_theta = int(model.get("rope_parameters", model)["rope_theta"])  # transformers 5 nests it
        values = {
            "layers": model["num_hidden_layers"],
            "hidden": model["hidden_size"],
            "ffn": model["intermediate_size"],
            "heads": model["num_attention_heads"],
            "kv_heads": model["num_key_value_heads"],
            "rope_theta": rope_theta,
            "vocab": model["vocab_size"],
            "head_dim": model["head_dim"],
            "model": tiny_model_dir,
            "ckpt": tmp_path / "ckpt",
            "data": data,
            "tp": tp,
            "entry": entry,
            "extra": extra,
        }
        script = tmp_path / "run-tiny-qwen3.sh"
        script.write_text(SCRIPT.format(**{**values, **overrides}))
        argv_file = tmp_path / "argv"
        subprocess.run(["bash", str(script)], check=True, env={"SLIME_ARGV": str(argv_file), "PATH": "/usr/bin:/bin"})
        words = argv_file.read_text().split("\0")[:-1]
        assert words[0] == "run"
        capsys.readouterr()
        status = run_command(words[1:], Plugins())
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_slime_style_launch_dry_runs_and_lists_flags_without_effect(launch):
    status, out, err = launch()
    assert status == 0, err
    assert "train_backend: megatron" in out  # chosen by the Megatron options, as slime's default
    assert "cuda_graph_bs:\n  - '1'\n  - '2'\n  - '4'\n  - '8'\n  - '16'" in out
    assert "# accepted, no effect here" in out
    for flag in ("--attention-backend", "--balance-data", "--qk-layernorm", "--optimizer"):
        assert f"- {flag}: accepted, no effect here:" in out
    assert "--attention-backend: accepted, no effect here" in err  # warned in a real run too


def test_architecture_mismatch_names_both_values(launch, tiny_model_dir):
    status, _, err = launch(layers=36)
    assert status == 2
    model = json.loads((Path(tiny_model_dir) / "config.json").read_text())
    assert f"--num-layers 36 says num_hidden_layers = 36, but it is {model['num_hidden_layers']}" in err


def test_fsdp_refuses_megatron_model_parallelism(launch):
    status, _, err = launch(extra="--train-backend fsdp", tp=2)
    assert status == 2
    assert (
        "--tensor-model-parallel-size 2 splits the model with Megatron, which --train-backend fsdp does not do; "
        "use --train-backend megatron" in err
    )


def test_async_entry_is_train_async(launch):
    status, out, err = launch(entry="--async", extra="--no-colocate")
    assert status == 0, err
    assert "train_mode: async" in out


def test_load_and_save_the_same_missing_directory_starts_fresh(tiny_model_dir, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    plugins, options = Plugins(), OptionSet()
    plugins.add_options(options)
    base = ["--prompt-data", str(data), "--hf-checkpoint", str(tiny_model_dir), "--rollout-batch-size", "2"]
    config = load_config([*base, "--load", str(tmp_path / "ckpt"), "--save", str(tmp_path / "ckpt")], options)
    assert preflight_problems(config, trains=True) == [] and config.load is None
    config = load_config([*base, "--load", str(tmp_path / "typo"), "--save", str(tmp_path / "ckpt")], options)
    assert any("--load" in p and "does not exist" in p for p in preflight_problems(config, trains=True))


def test_developer_dry_run_captures_launches_without_running_anything(tmp_path):
    """scripts/dry_run_slime_launches.py: a slime-style script's ``pkill``/``ray`` do nothing, the
    model file it sources from its author's checkout comes from the given checkout, and the
    ``python3 train.py`` behind ``ray job submit --`` is captured with its expanded arrays."""
    import importlib.util

    path = Path(__file__).parent.parent / "scripts" / "dry_run_slime_launches.py"
    spec = importlib.util.spec_from_file_location("dry_run_slime_launches", path)
    dry_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dry_run)
    checkout = tmp_path / "slime"
    (checkout / "scripts" / "models").mkdir(parents=True)
    (checkout / "scripts" / "models" / "tiny.sh").write_text("MODEL_ARGS=(--num-layers 2 --swiglu)\n")
    marker = tmp_path / "touched"
    (checkout / "scripts" / "run-tiny.sh").write_text(
        f"set -ex\npkill -9 python\ntouch {marker}\nsource /root/slime/scripts/models/tiny.sh\n"
        "ray job submit --address=x -- python3 train_async.py ${MODEL_ARGS[@]} --sglang-cuda-graph-bs 1 2\n"
    )
    scripts = dry_run.launch_scripts(checkout)
    assert scripts == [checkout / "scripts" / "run-tiny.sh"]
    launches = dry_run.capture_launches(scripts[0], checkout, dry_run.make_sandbox(str(tmp_path)))
    assert launches == [["train_async.py", "--num-layers", "2", "--swiglu", "--sglang-cuda-graph-bs", "1", "2"]]
    assert not marker.exists()  # touch is not among the tools the sandbox provides


def test_developer_dry_run_says_what_a_real_run_would_refuse_with_the_model_of_model_args(tmp_path):
    """scripts/dry_run_slime_launches.py: a launch's data and checkpoint are on its author's
    machine; its missing data file is stood in for, so the backend's checks still run, and the
    layout is checked against the model its MODEL_ARGS describe."""
    import importlib.util

    path = Path(__file__).parent.parent / "scripts" / "dry_run_slime_launches.py"
    spec = importlib.util.spec_from_file_location("dry_run_slime_launches", path)
    dry_run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dry_run)
    argv = ["train.py", "--prompt-data", "/nowhere/prompts.jsonl", "--hf-checkpoint", "/nowhere/model"]
    argv += ["--rollout-batch-size", "2", "--actor-num-gpus-per-node", "4", "--tensor-model-parallel-size", "4"]
    argv += ["--num-layers", "2", "--num-attention-heads", "6", "--group-query-attention", "--num-query-groups", "2"]
    missing, problems, _ = dry_run.dry_run_with_stand_ins(argv, dry_run.make_sandbox(str(tmp_path)))
    assert missing == ["/nowhere/prompts.jsonl"]
    model = "the model of the architecture flags (--hf-checkpoint /nowhere/model is not on this machine)"
    assert any(
        p.startswith(f"--tensor-model-parallel-size 4 does not divide the 6 attention heads of {model}")
        for p in problems
    )
    assert any("does not divide the 2 key/value heads" in p for p in problems)
    assert not any("prompts" in p for p in problems)  # the stand-in's own problems are not the launch's


def test_num_epoch_derives_the_rollout_count_as_slime_does(tmp_path, capsys, tiny_model_dir):
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+1=", "label": str(i + 1)}) + "\n" for i in range(10)))
    argv = [
        "--dry-run",
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-batch-size",
        "4",
        "--num-epoch",
        "3",
        "--rollout-max-response-len",
        "8",
    ]
    assert run_command(argv, Plugins()) == 0
    assert "num_rollout: 6\n" in capsys.readouterr().out  # 3 × (10 // 4)


def test_megatron_options_with_another_chosen_backend_are_warned_not_dropped(tmp_path, capsys, tiny_model_dir):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    base = [
        "--dry-run",
        "--prompt-data",
        str(data),
        "--hf-checkpoint",
        str(tiny_model_dir),
        "--rollout-batch-size",
        "1",
        "--rollout-max-response-len",
        "8",
    ]  # SGLang refuses a request longer than the tiny model's 128 positions
    assert run_command([*base, "--train-backend", "fsdp", "--recompute-granularity", "selective"], Plugins()) == 0
    out, err = capsys.readouterr()
    assert "train_backend: fsdp" in out
    assert "--recompute-granularity has no effect here: it configures the Megatron backend" in err
