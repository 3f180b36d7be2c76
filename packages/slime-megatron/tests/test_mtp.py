"""Multi-token prediction (MTP) layers of GLM-4.5+ and DeepSeek-V3 on the Megatron backend.

Tiny checkpoints hold one MTP layer in the Hugging Face layout (`build_tiny_model(mtp_layers=1)`).
Against independent computations: the main head's logits are transformers' (which ignores the
MTP layer), the MTP layer's logits are those of the same computation written with transformers'
modules (`reference_mtp_logits`), the MTP loss is their cross-entropy, and every conversion
(load, export, checkpoint, ``--save-hf``) gives back the checkpoint's tensors bit for bit.
"""

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from slime_core.config import ConfigError
from slime_core.testing import make_config, synthetic_rollout_batch
from slime_core.tools.tiny_models import build_tiny_model
from slime_core.train_backend import TrainGroup
from slime_megatron.models import hf_to_megatron, megatron_to_hf
from slime_megatron.parallel import destroy_parallel
from slime_megatron.rank import MegatronTrainRank

pytestmark = pytest.mark.integration

FAMILIES = ("glm4_moe", "deepseek_v3")
SETTINGS = dict(
    train_backend="megatron",
    rollout_batch_size=4,
    n_samples_per_prompt=4,
    lr=1e-3,
    micro_batch_size=16,
    rollout_max_response_len=8,
    weight_decay=0.01,
)


@pytest.fixture(scope="module")
def mtp_dirs(tmp_path_factory):
    """Per family: a tiny checkpoint with one MTP layer, and another one (seed 1)."""
    root = tmp_path_factory.mktemp("mtp-models")
    return {
        (family, seed): build_tiny_model(
            root / f"{family}-{seed}", family, hidden_size=32, seed=seed, router_bias=0.3, mtp_layers=1
        )
        for family in FAMILIES
        for seed in (0, 1)
    }


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    path = tmp_path_factory.mktemp("mtp-data") / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    return path


def checkpoint_tensors(model_dir) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def mtp_names(tensors) -> list[str]:
    return [name for name in tensors if name.startswith("model.layers.2.")]  # the tiny models have 2 decoder layers


def reference_mtp(model_dir):
    """``logits(tokens) -> (B, S − 1, V)``: the MTP layer's logits at positions 0..S−2
    (predicting tokens 2..S), written with transformers' modules: the decoder's final (normed)
    hidden state h_t and the next token's embedding e_{t+1} give
    x_t = eh_proj([enorm(e_{t+1}); hnorm(h_t)]), which a one-layer model holding the MTP
    layer's decoder layer, shared_head.norm and shared_head.head turns into logits."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    layer = f"model.layers.{hf.config.num_hidden_layers}."
    tensors = checkpoint_tensors(model_dir)
    mtp = {name.removeprefix(layer): t for name, t in tensors.items() if name.startswith(layer)}
    one = copy.deepcopy(hf.config)
    one.num_hidden_layers, one.first_k_dense_replace = 1, 0
    block_dir = Path(model_dir).parent / f"{Path(model_dir).name}-mtp-block"
    AutoModelForCausalLM.from_config(one).save_pretrained(block_dir)
    own = ("enorm.", "hnorm.", "eh_proj.", "shared_head.")
    block_tensors = {f"model.layers.0.{name}": t for name, t in mtp.items() if not name.startswith(own)}
    block_tensors.update(
        {
            "model.norm.weight": mtp["shared_head.norm.weight"],
            "lm_head.weight": mtp["shared_head.head.weight"],
            "model.embed_tokens.weight": tensors["model.embed_tokens.weight"],
        }
    )
    save_file(block_tensors, str(block_dir / "model.safetensors"), metadata={"format": "pt"})
    block = AutoModelForCausalLM.from_pretrained(block_dir).eval()
    eps = hf.config.rms_norm_eps
    rms = lambda x, w: w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # noqa: E731

    def logits(tokens: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = hf.model(tokens).last_hidden_state[:, :-1]
            e = hf.model.embed_tokens(tokens[:, 1:])
            x = F.linear(
                torch.cat([rms(e, mtp["enorm.weight"]), rms(h, mtp["hnorm.weight"])], -1), mtp["eh_proj.weight"]
            )
            return block(inputs_embeds=x).logits

    return logits


# ------------------------------------------------------------------ conversion and the model


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_to_megatron_to_hf_is_bit_exact_with_the_mtp_layer(family, mtp_dirs):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(mtp_dirs[family, 0])
    tensors = checkpoint_tensors(mtp_dirs[family, 0])
    megatron = hf_to_megatron(tensors, config, mtp_layers=1)
    assert (
        "mtp.layers.0.eh_proj.weight" in megatron
        and "mtp.layers.0.transformer_layer.mlp.router.expert_bias" in megatron
    )
    back = megatron_to_hf(megatron, config, mtp_layers=1)
    assert sorted(back) == sorted(tensors)
    assert [name for name in tensors if not torch.equal(back[name], tensors[name])] == []


def _mtp_model_rank(rank, sizes, cases):
    """Per (model_dir, tokens, mask): build with one MTP layer, load, then the main logits of a
    log-prob pass, depth 1's logits of an MTP training forward (gathered over tensor-parallel
    ranks), the MTP loss of its logits, the exported weights."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import gather_from_tensor_model_parallel_region
    from transformers import AutoConfig

    from slime_megatron.models import build_model, export_hf_weights, load_hf_weights
    from slime_megatron.models.mtp_loss import mtp_losses

    out = []
    for model_dir, tokens, mask in cases:
        config = AutoConfig.from_pretrained(model_dir)
        model = build_model(config, sizes, mtp_layers=1)
        load_hf_weights(model, model_dir, config)
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        with torch.no_grad():
            main = gather_from_tensor_model_parallel_region(model.eval()(tokens, positions, None))
        model.train()
        model.train_mtp = True
        both = model(tokens, positions, None)
        depth = both[:, tokens.shape[1] :]
        lengths = [tokens.shape[1]] * len(tokens)
        loss = mtp_losses(
            [depth],
            tokens,
            lengths,
            [tokens.shape[1] - 1] * len(tokens),
            mask,
            parallel_state.get_tensor_model_parallel_group(),
            config.vocab_size,
        )
        out.append(
            (
                main,
                gather_from_tensor_model_parallel_region(depth.detach()),
                loss.detach(),
                dict(export_hf_weights(model, config)),
            )
        )
    return out


def test_mtp_layers_load_compute_and_export_on_tensor_and_expert_parallel_ranks(mtp_dirs, run_ranks):
    """Both families on 2 gloo ranks (tensor-parallel 2 with sequence parallelism, experts over
    expert-parallel 2):
    the log-prob pass gives transformers' logits (the MTP layer stays out of them), the MTP
    layer's logits are the reference's, the MTP loss is their masked cross-entropy, export
    gives back every tensor of the checkpoint bit for bit."""
    from transformers import AutoModelForCausalLM

    tokens = torch.randint(4, 100, (2, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 9)
    mask[0, 3:5] = 0  # tokens 4 and 5 of the first row (a tool output) are not trained
    cases = [(str(mtp_dirs[family, 0]), tokens, mask) for family in FAMILIES]
    results = run_ranks(_mtp_model_rank, 2, cases, tp=2, ep=2, etp=1, sequence_parallel=True)
    for family, (main, depth, loss, exported) in zip(FAMILIES, results[0]):
        model_dir = mtp_dirs[family, 0]
        hf = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        with torch.no_grad():
            torch.testing.assert_close(main, hf(tokens).logits, atol=2e-5, rtol=1e-4, msg=family)
        reference = reference_mtp(model_dir)(tokens)
        torch.testing.assert_close(depth[:, :-1], reference, atol=2e-5, rtol=1e-4, msg=family)
        # depth 1 at position t predicts token t + 2; response tokens 1..9 with mask over them
        ce = F.cross_entropy(
            reference[:, :-1].reshape(-1, reference.shape[-1]), tokens[:, 2:].reshape(-1), reduction="none"
        ).reshape(2, -1)
        weights = mask[:, 1:]  # tokens 2..9 (token 1 has no depth-1 prediction)
        torch.testing.assert_close(loss, ((ce * weights).sum() / weights.sum()).reshape(1), atol=1e-5, rtol=1e-5)
        tensors = checkpoint_tensors(model_dir)
        assert sorted(exported) == sorted(tensors), family
        assert [name for name in tensors if not torch.equal(exported[name], tensors[name])] == [], family


# ------------------------------------------------------------------ training on a rank


def in_process_rank(prompts, model_dir, **options):
    config = make_config(prompts, model_dir, **SETTINGS, **options)
    group = TrainGroup(MegatronTrainRank, config, 1, in_process=True)
    return group, group.init()


def exported(group) -> dict[str, torch.Tensor]:
    return {name: tensor for bucket in group.export_weights(1 << 20) for name, tensor in bucket}


@pytest.fixture(scope="module")
def mtp_runs(prompts, mtp_dirs, tmp_path_factory):
    """Two in-process ranks on the GLM-4.5 tiny model. ``trained``: --enable-mtp-training (and
    engines that draft with the MTP layer), log-probs before training, one rollout, the weights
    it pushes, a checkpoint. ``frozen``: resumed from that checkpoint with another model as
    --hf-checkpoint, without --enable-mtp-training: one rollout, then a checkpoint with --save-hf."""
    root = tmp_path_factory.mktemp("mtp-runs")
    model_dir = mtp_dirs["glm4_moe", 0]
    batch = synthetic_rollout_batch(seed=0)
    try:
        group, _ = in_process_rank(
            prompts,
            model_dir,
            mtp_num_layers=1,
            enable_mtp_training=True,
            sglang_speculative_algorithm="EAGLE",
            save=str(root / "trained"),
        )
        trained = SimpleNamespace(log_probs=group.compute_log_probs(batch))
        trained.metrics = group.train(0, batch)
        trained.weights = exported(group)
        trained.checkpoint = Path(group.save(0))
    finally:
        destroy_parallel()
    try:
        group, state = in_process_rank(
            prompts,
            mtp_dirs["glm4_moe", 1],
            mtp_num_layers=1,
            load=str(root / "trained"),
            save=str(root / "frozen"),
            save_hf=str(root / "frozen-hf"),
        )
        frozen = SimpleNamespace(
            state=state, before=exported(group), metrics=group.train(1, synthetic_rollout_batch(seed=1))
        )
        frozen.weights = exported(group)
        group.save(1)
        frozen.hf = root / "frozen-hf" / "iter_0000001"
    finally:
        destroy_parallel()
    return SimpleNamespace(model_dir=model_dir, batch=batch, trained=trained, frozen=frozen)


def test_log_probs_come_from_the_main_head_and_the_mtp_loss_is_reported(mtp_runs):
    """Before training, the actor's log-probs are transformers' (which has no MTP layer); the
    first step reports the MTP loss of the starting weights: the reference MTP layer's
    cross-entropy over every response token of the batch (one micro-batch)."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(mtp_runs.model_dir).eval()
    mtp_logits = reference_mtp(mtp_runs.model_dir)
    batch, want_log_probs, losses = mtp_runs.batch, [], []
    for tokens, r in zip(batch.tokens, batch.response_lengths):
        ids, n = torch.tensor([tokens]), len(tokens)
        with torch.no_grad():
            log_probs = hf(ids).logits[0].log_softmax(-1)
        want_log_probs.append(log_probs[n - r - 1 : n - 1].gather(1, ids[0, n - r :, None]).squeeze(1))
        reference = mtp_logits(ids)[0]  # position t predicts token t + 2
        losses.append(F.cross_entropy(reference[n - r - 2 : n - 2], ids[0, n - r :], reduction="none"))
    for got, want in zip(mtp_runs.trained.log_probs, want_log_probs):
        torch.testing.assert_close(torch.tensor(got), want, atol=2e-5, rtol=1e-4)
    assert mtp_runs.trained.metrics["mtp_loss"] == pytest.approx(torch.cat(losses).mean().item(), rel=1e-4)


def test_mtp_training_changes_and_pushes_the_mtp_layer_and_resume_keeps_it_frozen(mtp_runs):
    """With --enable-mtp-training the MTP layer learns and the engines get it (its head is the
    output layer); the checkpoint holds it (as ``slime convert megatron-to-hf`` reads it), a
    resumed run without --enable-mtp-training keeps it as saved while the policy trains, and
    --save-hf writes it as the checkpoint had it."""
    from transformers import AutoConfig

    from slime_megatron.torch_dist import read_hf_weights

    start = checkpoint_tensors(mtp_runs.model_dir)
    trained, frozen = mtp_runs.trained.weights, mtp_runs.frozen
    layer = mtp_names(start)
    assert sorted(trained) == sorted(start)
    unchanged = [name for name in layer if torch.equal(trained[name], start[name])]
    assert unchanged == ["model.layers.2.mlp.gate.e_score_correction_bias"]  # a buffer, never trained
    assert torch.equal(trained["model.layers.2.shared_head.head.weight"], trained["lm_head.weight"])
    stored = read_hf_weights(mtp_runs.trained.checkpoint, AutoConfig.from_pretrained(mtp_runs.model_dir))
    assert sorted(stored) == sorted(trained)
    assert [name for name in trained if not torch.equal(stored[name], trained[name])] == []
    assert frozen.state == {"rollout_id": 1, "weight_version": 1}
    assert not any(name in frozen.weights for name in layer)  # no pushes: the engines do not draft
    assert torch.equal(frozen.before["lm_head.weight"], trained["lm_head.weight"])
    assert not torch.equal(frozen.weights["lm_head.weight"], trained["lm_head.weight"])
    saved = checkpoint_tensors(frozen.hf)
    assert sorted(saved) == sorted(start)
    assert torch.equal(saved["model.layers.2.shared_head.head.weight"], frozen.weights["lm_head.weight"])
    assert [name for name in layer if not torch.equal(saved[name], trained[name])] == [
        "model.layers.2.shared_head.head.weight"
    ]


# ------------------------------------------------------------------ options


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(mtp_num_layers=2), r"holds 1 MTP layer\(s\).*set --mtp-num-layers 1"),
        (dict(enable_mtp_training=True), r"--enable-mtp-training trains .* --mtp-num-layers N, which is not set"),
        (
            dict(mtp_num_layers=1, pipeline_model_parallel_size=2, actor_num_gpus_per_node=2),
            "builds MTP layers without pipeline parallelism only",
        ),
        (dict(mtp_num_layers=1, train_backend="fsdp"), "have no multi-token prediction module"),
    ],
    ids=["too-many", "training-without-layers", "pipeline", "fsdp"],
)
def test_mtp_options_that_cannot_work_are_config_errors(prompts, mtp_dirs, options, message):
    with pytest.raises(ConfigError, match=message):
        make_config(prompts, mtp_dirs["glm4_moe", 0], **{**SETTINGS, **options})


def test_a_checkpoint_or_family_without_mtp_layers_is_a_config_error(prompts, tmp_path):
    """A GLM-4.5 checkpoint whose config.json declares an MTP layer but whose weights lack it
    (transformers' save_pretrained drops them), and a family without MTP layers."""
    glm = build_tiny_model(tmp_path / "glm", "glm4_moe", hidden_size=32)
    with pytest.raises(ConfigError, match=r"holds 0 MTP layer\(s\) \(config.json declares num_nextn_predict_layers 1"):
        make_config(prompts, glm, **SETTINGS, mtp_num_layers=1)
    qwen = build_tiny_model(tmp_path / "qwen", "qwen3", hidden_size=32)
    with pytest.raises(ConfigError, match="qwen3 family has no multi-token prediction layers"):
        make_config(prompts, qwen, **SETTINGS, mtp_num_layers=1)
