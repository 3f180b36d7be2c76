"""Functions for slime's Megatron-side flags, written the way a slime user writes them (slime's
signatures, ``args`` first), for ``test_custom_hooks.py``. They run in the Megatron train rank;
each appends what it was given to ``<output-dir>/hook_calls.jsonl``, one JSON line per call,
and some change training in a way the test can see."""

import json
from pathlib import Path

from megatron.core import parallel_state as mpu
from megatron.core.optimizer import MegatronOptimizer
from megatron.core.transformer.module import MegatronModule

_RUN = {}  # what the init function kept from args, for the model provider (slime's reads get_args())


def _record(args, hook: str, **fields) -> None:
    with open(Path(args.output_dir) / "hook_calls.jsonl", "a") as f:
        f.write(json.dumps({"hook": hook, **fields}) + "\n")


def _fingerprint(model) -> float:
    """A number that changes when any parameter of the model chunks does."""
    return sum(float(p.detach().double().abs().sum()) for chunk in model for p in chunk.parameters())


def _innermost(chunk):
    while hasattr(chunk, "module"):
        chunk = chunk.module
    return chunk


def megatron_init(args):
    _RUN["args"] = args
    _record(
        args,
        "init",
        parallel_ready=mpu.model_parallel_is_initialized(),
        tp=mpu.get_tensor_model_parallel_world_size(),
        pp=mpu.get_pipeline_model_parallel_world_size(),
    )


def model_provider(pre_process=True, post_process=True, vp_stage=None):
    from transformers import AutoConfig

    from slime_megatron.models import build_model

    args = _RUN["args"]
    model = build_model(AutoConfig.from_pretrained(args.hf_checkpoint), args)
    model.made_by_the_custom_provider = True
    _record(args, "provider", pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)
    return model


def before_log_prob(args, model, store_prefix):
    _record(
        args,
        "log_prob",
        store_prefix=store_prefix,
        chunks=[type(chunk).__name__ for chunk in model],
        megatron_modules=all(isinstance(chunk, MegatronModule) for chunk in model),
        custom_provider=all(getattr(_innermost(chunk), "made_by_the_custom_provider", False) for chunk in model),
    )


def before_train_step(args, rollout_id, step_id, model, optimizer, opt_param_scheduler):
    _record(
        args,
        "train_step",
        rollout_id=rollout_id,
        step_id=step_id,
        chunks=len(model),
        megatron_optimizer=isinstance(optimizer, MegatronOptimizer),
        scheduler=repr(opt_param_scheduler),
        fingerprint=_fingerprint(model),
    )
    if (rollout_id, step_id) == (0, 1):  # this step must not move any weight
        for group in optimizer.param_groups:
            group["lr"] = 0.0


def rollout_data_postprocess(args, rollout_id, rollout_data):
    _record(
        args,
        "postprocess",
        rollout_id=rollout_id,
        keys=sorted(rollout_data),
        samples=len(rollout_data["tokens"]),
        mask_lengths_match=[len(m) for m in rollout_data["loss_masks"]] == rollout_data["response_lengths"],
        response_lengths=rollout_data["response_lengths"],
        entropy={key: [e.tolist() for e in rollout_data[key]] for key in ("entropy", "ref_entropy")},
    )
    if rollout_id == 1:  # train on nothing: every gradient of this rollout is zero
        for mask in rollout_data["loss_masks"]:
            mask.zero_()


def post_write(args, version_dir, rollout_engines):
    files = sorted(p.name for p in Path(version_dir).iterdir())
    _record(
        args,
        "post_write",
        version_dir=version_dir,
        has_config="config.json" in files,
        has_weights=any(name.endswith(".safetensors") for name in files),
        rollout_engines=list(rollout_engines),
    )
