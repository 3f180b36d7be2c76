"""Packed and padded micro-batches, and the clear errors for bad input (in-process, fast)."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from slime_core.algorithms import PolicyLossConfig, PolicyLossInputs, compute_policy_loss, loss_denominators
from slime_core.rank.micro_batches import token_budget_micro_batches
from slime_core.rank.step import pad_rows
from slime_core.testing import synthetic_rollout_batch
from slime_core.tools.tiny_models import build_tiny_qwen3
from slime_fsdp import inputs
from slime_fsdp.checkpoint import latest_checkpoint
from slime_fsdp.model import load_model, load_tokenizer


def test_packed_and_padded_batches_give_the_same_log_probs_and_loss(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = synthetic_rollout_batch(num_groups=2)
    results = {}
    for name, micro in [
        ("packed", inputs.packed(batch.tokens, batch.response_lengths, "cpu", model.config._attn_implementation)),
        ("padded", inputs.padded(batch.tokens, batch.response_lengths, "cpu", pad_token_id=0)),
    ]:
        logits = model(**micro.model_inputs()).logits
        log_probs = pad_rows(inputs.response_log_probs(logits, micro, temperature=0.7))
        mask = pad_rows(batch.loss_masks)
        loss_inputs = PolicyLossInputs(log_probs, log_probs.detach() - 0.1, torch.ones_like(mask), mask)
        loss, _ = compute_policy_loss(loss_inputs, PolicyLossConfig(), loss_denominators(mask))
        results[name] = log_probs, loss
    assert micro.input_ids.shape[0] == len(batch)  # the padded one has a row per sample
    torch.testing.assert_close(results["packed"][0], results["padded"][0], rtol=1e-5, atol=1e-5)
    assert results["packed"][1].item() == pytest.approx(results["padded"][1].item(), rel=1e-5)


def test_packing_keeps_samples_apart():
    micro = inputs.packed([[5, 6, 7], [8, 9]], [1, 1], "cpu", "sdpa")
    assert micro.position_ids.tolist() == [[0, 1, 2, 0, 1]]
    mask = micro.attention_mask[0, 0]
    assert mask[3, :3].sum() == 0 and mask[4].tolist() == [False, False, False, True, True]
    assert inputs.packed([[5, 6]], [1], "cpu", "flash_attention_2").attention_mask is None


def test_missing_checkpoint_directories_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="--hf-checkpoint .*does not exist"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="--load .*does not exist; give the --save directory"):
        latest_checkpoint(str(tmp_path / "no-ckpt"))
    assert latest_checkpoint(str(tmp_path)) is None  # an empty --save directory: a fresh start


def test_a_tokenizer_that_does_not_fit_the_model_is_an_error(tmp_path):
    directory = build_tiny_qwen3(tmp_path / "model")
    model = load_model(str(directory))
    model.resize_token_embeddings(50)
    with pytest.raises(ValueError, match="tokenizer .* has 100 tokens but the model's embedding has 50 rows"):
        load_tokenizer(str(directory), model)


def test_a_sample_longer_than_the_token_budget_is_an_error():
    with pytest.raises(ValueError, match="sample of 30 tokens does not fit in --max-tokens-per-gpu 16"):
        token_budget_micro_batches([0, 1], [10, 30], max_tokens=16)


def test_fsdp_torch_compile_compiles_every_decoder_layer_and_warns_with_megatron(tiny_model_dir, tmp_path):
    """What the option does to the model (the compiled forward's equality with the eager one
    is checked on a GPU, `test_gpu.py`), and that it is reported as inert elsewhere."""
    from slime_core.config.no_effect import no_effect_warnings
    from slime_core.testing import make_config

    layers = load_model(tiny_model_dir, compile_layers=True).model.layers
    assert len(layers) > 1 and all(hasattr(layer.forward, "_torchdynamo_orig_callable") for layer in layers)
    assert not any(
        hasattr(layer.forward, "_torchdynamo_orig_callable") for layer in load_model(tiny_model_dir).model.layers
    )
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "1+1=", "label": "2"}\n')
    config = make_config(
        prompts, tiny_model_dir, train_backend="megatron", fsdp_torch_compile=True, rollout_batch_size=1
    )
    assert any(w.startswith("--fsdp-torch-compile has no effect here") for w in no_effect_warnings(config))
