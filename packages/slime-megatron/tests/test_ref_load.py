"""``--ref-load`` as a Megatron checkpoint, as slime's launch scripts give it: the reference
model's weights come from it (log-probs equal to those with the same model as a Hugging Face
directory), and, as in slime, so do the policy's starting weights while --load holds none.
The reference differs from --hf-checkpoint's model, so a checkpoint not read would show."""

import json

import pytest

from slime_core.checkpoint.directory import megatron_checkpoint
from slime_core.cli.main import main
from slime_core.rank.processes import spawn_ranks
from slime_core.testing import actor_and_reference_log_probs, make_config
from slime_megatron.torch_dist import stored_key


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory):
    """The tiny model with every weight perturbed, as a Hugging Face directory and as a
    checkpoint laid out as slime's tools/convert_hf_to_torch_dist.py writes it: the tracker
    says ``release``, the weights are in ``release/``, without our slime.json and extras."""
    from slime_core.tools.tiny_models import perturbed_copy

    root = tmp_path_factory.mktemp("reference")
    perturbed_copy(tiny_model_dir, root / "hf")
    assert main(["convert", "hf-to-megatron", "--hf", str(root / "hf"), "--out", str(root / "megatron")]) == 0
    (root / "megatron" / "iter_0000000").rename(root / "megatron" / "release")
    (root / "megatron" / "latest_checkpointed_iteration.txt").write_text("release")
    for extra in [
        *(root / "megatron" / "release").glob("extra_rank_*.pt"),
        root / "megatron" / "release" / "slime.json",
    ]:
        extra.unlink()
    return root


def _log_probs(rank, world_size, port, configs):
    """Per config: (actor, reference) log-probs of one rollout batch on a fresh Megatron rank."""
    from slime_megatron.parallel import destroy_parallel
    from slime_megatron.rank import MegatronTrainRank

    return actor_and_reference_log_probs(MegatronTrainRank, destroy_parallel, rank, world_size, port, configs)


def test_a_megatron_ref_load_gives_the_reference_and_the_starting_weights(reference, tiny_model_dir, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    settings = dict(
        train_backend="megatron",
        rollout_batch_size=4,
        n_samples_per_prompt=4,
        use_kl_loss=True,
        rollout_max_response_len=8,
    )
    configs = [
        make_config(prompts, tiny_model_dir, ref_load=str(reference / source), **settings)
        for source in ("hf", "megatron")
    ]
    (actor, ref_from_hf), (start_from_megatron, ref_from_megatron) = spawn_ranks(_log_probs, 1, configs)[0]
    assert ref_from_megatron == ref_from_hf
    assert ref_from_hf != actor  # the reference is another model than --hf-checkpoint's
    assert start_from_megatron == ref_from_megatron  # as in slime: the policy starts from --ref-load


def test_slime_release_layout_is_found_and_a_broken_pointer_is_explained(reference, tmp_path):
    assert megatron_checkpoint(reference / "megatron") == reference / "megatron" / "release"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("12")
    with pytest.raises(FileNotFoundError, match="names iter_0000012, which holds no torch_dist checkpoint"):
        megatron_checkpoint(tmp_path)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("best")
    with pytest.raises(ValueError, match="neither an iteration number nor 'release'"):
        megatron_checkpoint(tmp_path)


def test_stored_keys_of_either_writer_are_found():
    """Layers stacked or one key each; our local layers' fused norm names or a Transformer
    Engine MoE layer's own pre-MLP norm (Megatron-LM); experts stacked."""
    norm = "decoder.layers.3.pre_mlp_layernorm.weight"
    assert stored_key(norm, {"decoder.layers.mlp.linear_fc1.layer_norm_weight": 0}) == (
        "decoder.layers.mlp.linear_fc1.layer_norm_weight",
        (3,),
    )
    assert stored_key(norm, {"decoder.layers.pre_mlp_layernorm.weight": 0}) == (
        "decoder.layers.pre_mlp_layernorm.weight",
        (3,),
    )
    assert stored_key(
        "decoder.layers.1.input_layernorm.weight", {"decoder.layers.1.self_attention.linear_qkv.layer_norm_weight": 0}
    ) == ("decoder.layers.1.self_attention.linear_qkv.layer_norm_weight", ())
    expert = "decoder.layers.0.mlp.experts.local_experts.2.linear_fc1.weight"
    assert stored_key(expert, {"decoder.layers.0.mlp.experts.experts.linear_fc1.weight": 0}) == (
        "decoder.layers.0.mlp.experts.experts.linear_fc1.weight",
        (2,),
    )
    assert stored_key(expert, {"decoder.layers.mlp.experts.experts.linear_fc1.weight": 0}) == (
        "decoder.layers.mlp.experts.experts.linear_fc1.weight",
        (0, 2),
    )
    assert stored_key("embedding.word_embeddings.weight", {"embedding.word_embeddings.weight": 0}) == (
        "embedding.word_embeddings.weight",
        (),
    )
    with pytest.raises(KeyError, match="stores no 'output_layer.weight'"):
        stored_key("output_layer.weight", {})


def test_the_norms_of_multi_latent_attention_layers_are_found_under_either_writers_names():
    """megatron's local MLA layers (ours, DeepSeek-V3) store the input norm under its own name,
    not fused into a linear_qkv they do not have; Transformer Engine MLA layers (Megatron-LM's)
    fuse the compressed q and kv norms into their up-projections."""
    layer = "decoder.layers.0."
    assert stored_key(layer + "input_layernorm.weight", {layer + "input_layernorm.weight": 0}) == (
        layer + "input_layernorm.weight",
        (),
    )
    for ours, theirs in (("q_layernorm", "linear_q_up_proj"), ("kv_layernorm", "linear_kv_up_proj")):
        for stored in (f"self_attention.{ours}.weight", f"self_attention.{theirs}.layer_norm_weight"):
            assert stored_key(f"{layer}self_attention.{ours}.weight", {layer + stored: 0}) == (layer + stored, ())
