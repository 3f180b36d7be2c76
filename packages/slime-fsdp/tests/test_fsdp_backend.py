"""The FSDP2 backend on real Ray actors and gloo process groups, with a tiny Qwen3 model."""

import pytest
import torch

from slime_core.testing import synthetic_rollout_batch as rollout_batch
from slime_core.train_backend import TrainGroup
from slime_fsdp.rank import FSDPTrainRank

pytestmark = pytest.mark.integration


def all_weights(group: TrainGroup) -> dict[str, torch.Tensor]:
    return {name: tensor for bucket in group.export_weights(64 * 1024) for name, tensor in bucket}


def start(config, num_ranks: int = 1) -> TrainGroup:
    group = TrainGroup(FSDPTrainRank, config, num_ranks)
    group.init()
    return group


def test_two_ranks_give_the_loss_and_weights_of_one_rank(ray_cluster, fsdp_config):
    config = fsdp_config(micro_batch_size=3, use_kl_loss=True, kl_loss_coef=0.1, entropy_coef=0.01)
    batch = rollout_batch()
    results = {}
    for num_ranks in (1, 2):
        group = start(config, num_ranks)
        try:
            results[num_ranks] = group.train(0, batch), all_weights(group)
        finally:
            group.shutdown()
    (one_metrics, one_weights), (two_metrics, two_weights) = results[1], results[2]
    for key in ("loss", "pg_loss", "kl_loss", "entropy", "grad_norm"):
        assert two_metrics[key] == pytest.approx(one_metrics[key], rel=1e-4, abs=1e-6), key
    assert one_weights.keys() == two_weights.keys()
    for name in one_weights:
        # Adam turns float noise in near-zero gradients into updates of up to lr (1e-3); the
        # gradient norm above catches any scale error, which Adam would hide.
        torch.testing.assert_close(two_weights[name], one_weights[name], rtol=1e-4, atol=1e-5)


def test_first_step_is_on_policy_and_grpo_raises_the_rewarded_token(ray_cluster, fsdp_config, tmp_path, tiny_model_dir):
    """Old log-probs from the same weights give ratio 1 (ppo_kl 0, nothing clipped); the
    reference and a teacher loaded from the same directory equal the actor before any update; then GRPO, rewarding
    responses that start
    with '7', makes '7' more likely; the exported HF directory reproduces the log-probs."""
    config = fsdp_config(
        use_kl_loss=True,
        kl_loss_coef=0.0,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=40,
        opd_teacher_load=str(tiny_model_dir),
        opd_kl_coef=0.0,
    )
    group = start(config)
    try:
        batch = rewarded_batch(seed=0)
        actor = group.compute_log_probs(batch, "actor")
        assert group.compute_log_probs(batch, "ref") == actor
        teacher = group.compute_log_probs(batch, "teacher")  # the same weights, unsharded and unpacked
        assert all(torch.allclose(torch.tensor(t), torch.tensor(a), atol=1e-5) for t, a in zip(teacher, actor))
        before = probability_of_seven(group)
        first = group.train(0, batch)
        assert first["ppo_kl"] == pytest.approx(0.0, abs=1e-7) and first["pg_clipfrac"] == 0.0
        for rollout_id in range(1, 6):
            group.train(rollout_id, rewarded_batch(seed=rollout_id))
        assert probability_of_seven(group) > 2 * before  # about 0.016 -> 0.04 in six steps
        assert group.call("weight_version")[0] == 6
        group.call("save_hf", str(tmp_path / "hf"))
        check_hf_export(tmp_path / "hf", batch, group.compute_log_probs(batch))
    finally:
        group.shutdown()


def rewarded_batch(seed: int):
    """Random responses; reward 1 when the response starts with the token '7'."""
    from slime_core.tools.tiny_models import build_char_tokenizer

    seven = build_char_tokenizer().convert_tokens_to_ids("7")
    batch = rollout_batch(seed=seed)
    for i, (tokens, length) in enumerate(zip(batch.tokens, batch.response_lengths)):
        if i % 2 == 0:
            tokens[len(tokens) - length] = seven
        batch.rewards[i] = float(tokens[len(tokens) - length] == seven)
    return batch


def probability_of_seven(group: TrainGroup) -> float:
    from slime_core.rollout_batch import RolloutBatch
    from slime_core.tools.tiny_models import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    prompts = [tokenizer.encode(f"{a}+{b}=") for a, b in [(3, 4), (12, 30), (41, 8), (25, 25)]]
    seven = tokenizer.convert_tokens_to_ids("7")
    probe = RolloutBatch([p + [seven] for p in prompts], [1] * 4, [[1]] * 4, [0.0] * 4, [0, 1, 2, 3], [[0.0]] * 4)
    log_probs = group.compute_log_probs(probe)
    return sum(torch.tensor(lp).exp().item() for lp in log_probs) / len(log_probs)


def check_hf_export(path, batch, expected, model=None):
    """``model``: the one loaded from ``path`` (default: a transformers model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_core.algorithms import log_probs_from_logits

    model = model or AutoModelForCausalLM.from_pretrained(path)
    assert len(AutoTokenizer.from_pretrained(path)) == model.config.vocab_size
    assert model.config.use_cache and model.generation_config.use_cache is not False  # generate keeps its KV cache
    for tokens, length, want in zip(batch.tokens, batch.response_lengths, expected):
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0]
        got = log_probs_from_logits(logits[len(tokens) - length - 1 : -1], torch.tensor(tokens[-length:]))
        torch.testing.assert_close(got, torch.tensor(want), rtol=1e-4, atol=1e-5)


def test_resuming_a_checkpoint_continues_exactly(ray_cluster, fsdp_config, tmp_path):
    """A rank saves after rollout 0 and trains on (the loop's order); a fresh rank resumed
    from that checkpoint trains rollouts 1 and 2 to the same weights, bit for bit."""
    options = dict(lr_warmup_iters=2, lr_decay_style="cosine", lr_decay_iters=6, weight_decay=0.01)
    saving = start(fsdp_config(save=str(tmp_path / "ckpt"), save_hf=str(tmp_path / "hf"), **options))
    try:
        saving.train(0, rollout_batch(seed=0))
        saving.call("save", 0)
        for rollout_id in (1, 2):
            saving.train(rollout_id, rollout_batch(seed=rollout_id))
        expected = all_weights(saving)
    finally:
        saving.shutdown()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "iter_0000000",
        "latest_checkpointed_iteration.txt",
    ]
    assert (tmp_path / "hf" / "iter_0000000" / "model.safetensors").is_file()

    resumed = TrainGroup(FSDPTrainRank, fsdp_config(load=str(tmp_path / "ckpt"), **options), 1)
    try:
        state = resumed.init()
        assert state == {"rollout_id": 1, "weight_version": 1}
        for rollout_id in (1, 2):
            resumed.train(rollout_id, rollout_batch(seed=rollout_id))
        got = all_weights(resumed)
    finally:
        resumed.shutdown()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name


def test_sft_with_memory_saving_options_and_offload(ray_cluster, fsdp_config):
    """``--loss-type sft_loss`` trains through the same backend (the responses' negative
    log-likelihood falls) with bf16 compute, gradient checkpointing and FSDP CPU offload;
    offload / onload keeps the weights."""
    config = fsdp_config(loss_type="sft_loss", bf16=True, gradient_checkpointing=True, fsdp_cpu_offload=True, lr=1e-2)
    group = start(config)
    try:
        batch = rollout_batch(seed=3)
        nll = lambda: -sum(sum(lp) for lp in group.compute_log_probs(batch))  # noqa: E731
        before = nll()
        losses = [group.train(rollout_id, batch)["loss"] for rollout_id in range(3)]
        assert nll() < 0.9 * before and losses[-1] < losses[0]
        probe = group.compute_log_probs(batch)
        group.call("offload")
        group.call("onload")
        assert group.compute_log_probs(batch) == probe
        assert group.call("memory")[0]["peak_rss_gib"] > 0.1  # the actor's own process, torch loaded
    finally:
        group.shutdown()


def test_ppo_critic_fits_the_returns_and_feeds_the_actors_gae(ray_cluster, fsdp_config):
    """The critic (same contract, value head) learns: its value loss falls as it fits the
    returns; the actor's ``ppo`` estimator trains on the critic's values and asks for them
    when they are missing."""
    from slime_fsdp.critic import FSDPCriticRank

    config = fsdp_config(advantage_estimator="ppo", critic_lr=1e-2, gamma=1.0, lambd=0.95)
    batch = rollout_batch(seed=5)
    critic = TrainGroup(FSDPCriticRank, config, 1)
    actor = start(config)
    try:
        critic.init()
        assert all(v == 0.0 for values in critic.compute_values(batch) for v in values)  # zero-initialised head
        losses = [critic.train_critic(rollout_id, batch)["value_loss"] for rollout_id in range(4)]
        assert losses[-1] < 0.7 * losses[0]
        batch.values = critic.compute_values(batch)
        assert [len(v) for v in batch.values] == batch.response_lengths
        metrics = actor.train(0, batch)
        assert metrics["ppo_kl"] == pytest.approx(0.0, abs=1e-7) and metrics["grad_norm"] > 0
        batch.values = None
        with pytest.raises(Exception, match="'ppo' advantage estimator needs critic values"):
            actor.train(1, batch)
    finally:
        critic.shutdown()
        actor.shutdown()


def test_a_checkpoint_where_an_earlier_ppo_run_saved_its_critic_over_the_policy_is_refused(fsdp_config, tmp_path):
    """Before each role had its own place, a PPO run's critic saved into the policy's
    ``iter_*``: resuming the policy from it is refused, saying why, instead of failing on a
    missing key."""
    from slime_core.checkpoint.directory import CheckpointError
    from slime_core.testing import destroy_default_group
    from slime_fsdp.critic import FSDPCriticRank

    try:
        critic = TrainGroup(
            FSDPCriticRank, fsdp_config(advantage_estimator="ppo", save=str(tmp_path)), 1, in_process=True
        )
        critic.init()
        critic.save(0)  # the critic's ranks given the policy's directory: the old layout
    finally:
        destroy_default_group()
    try:
        policy = TrainGroup(FSDPTrainRank, fsdp_config(load=str(tmp_path)), 1, in_process=True)
        with pytest.raises(CheckpointError, match=f"{tmp_path / 'iter_0000000'} holds a PPO critic, not the policy"):
            policy.init()
    finally:
        destroy_default_group()


@pytest.mark.slow
def test_lora_trains_only_the_adapter_exports_merged_weights_and_resumes_exactly(ray_cluster, fsdp_config, tmp_path):
    """``--lora-rank``: GRPO raises the rewarded token through the adapter alone; the engines'
    weights (Hugging Face names, adapter merged) change only in the targeted layers; the
    checkpoint holds the adapter and its optimizer state, not the base, and resumes bit for bit;
    ``--save-hf`` writes an adapter directory that peft loads onto the base model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    lora = dict(lora_rank=4, lora_alpha=8, lora_dropout=0.1, lora_target_modules=["linear_qkv", "linear_fc2"])
    options = dict(lr=1e-2, use_kl_loss=True, kl_loss_coef=0.01, **lora)
    saving = start(fsdp_config(save=str(tmp_path / "ckpt"), save_hf=str(tmp_path / "hf"), **options))
    try:
        base, before = all_weights(saving), probability_of_seven(saving)
        saving.train(0, rewarded_batch(seed=0))
        saving.call("save", 0)
        saved_batch = rewarded_batch(seed=0)
        saved = saving.compute_log_probs(saved_batch)
        for rollout_id in range(1, 4):
            saving.train(rollout_id, rewarded_batch(seed=rollout_id))
        expected = all_weights(saving)
        assert probability_of_seven(saving) > 1.5 * before
    finally:
        saving.shutdown()
    assert base.keys() == expected.keys() and not any("lora" in name or "base_layer" in name for name in base)
    changed = {name for name in base if not torch.equal(base[name], expected[name])}
    assert changed == {
        n for n in base if n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "down_proj.weight"))
    }
    stored = (tmp_path / "ckpt" / "iter_0000000" / ".metadata").read_bytes()
    assert (
        b"lora_A" in stored and b"exp_avg" in stored and b"base_layer" not in stored and b"embed_tokens" not in stored
    )

    adapter = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(fsdp_config().hf_checkpoint), tmp_path / "hf" / "iter_0000000"
    )
    check_hf_export(tmp_path / "hf" / "iter_0000000", saved_batch, saved, model=adapter.eval())

    resumed = TrainGroup(FSDPTrainRank, fsdp_config(load=str(tmp_path / "ckpt"), **options), 1)
    try:
        assert resumed.init() == {"rollout_id": 1, "weight_version": 1}
        for rollout_id in range(1, 4):
            resumed.train(rollout_id, rewarded_batch(seed=rollout_id))
        got = all_weights(resumed)
    finally:
        resumed.shutdown()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name
