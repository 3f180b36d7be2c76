"""`slime tiny-model --family NAME`: each family's tiny model keeps the structural options of the
released checkpoint's config.json it names (scaled down in sizes only). The expected values are
written by hand from the released configs (and slime's scripts/models/*.sh for them)."""

import json

import pytest

from slime_core.cli.main import main
from slime_core.tools.tiny_models import TINY_SHAPES, tiny_config

#: Per --family name, what its released config.json sets that the tiny config must keep.
RELEASED = {
    "qwen2": dict(tie_word_embeddings=False),
    "qwen2_tied": dict(tie_word_embeddings=True),
    "qwen3": dict(tie_word_embeddings=True),
    "qwen3_untied": dict(tie_word_embeddings=False),
    "llama": dict(
        rope_parameters=dict(
            rope_type="llama3",
            rope_theta=500000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=8192,
        )
    ),
    "qwen3_moe": dict(norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], head_dim=32),
    "glm4": dict(attention_bias=True, partial_rotary_factor=0.5),
    "glm4_moe": dict(
        attention_bias=True,
        use_qk_norm=True,
        partial_rotary_factor=0.5,
        routed_scaling_factor=2.5,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        norm_topk_prob=True,
        n_shared_experts=1,
        head_dim=32,
    ),
    "deepseek_v3": dict(
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_rope_head_dim=8,
        qk_nope_head_dim=16,
        v_head_dim=16,
        rope_parameters=dict(
            rope_type="yarn",
            rope_theta=10000.0,
            factor=40.0,
            mscale=1.0,
            mscale_all_dim=1.0,
            original_max_position_embeddings=4096,
            beta_fast=32.0,
            beta_slow=1.0,
        ),
        n_group=2,
        topk_group=1,
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        first_k_dense_replace=1,
        n_shared_experts=1,
    ),
    "qwen3_next": dict(partial_rotary_factor=0.25, head_dim=32, norm_topk_prob=True, mlp_only_layers=[]),
    "glm_moe_dsa": dict(qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=32, routed_scaling_factor=2.5, n_group=1),
}


def _kept(config, want: dict) -> dict:
    """The config's values of the fields in ``want`` (the rotary ones from ``rope_parameters``,
    where transformers 5 keeps them)."""
    rope = config.rope_parameters
    got = {}
    for key, value in want.items():
        if key == "rope_parameters":
            got[key] = {k: rope.get(k) for k in value}
        elif key == "partial_rotary_factor":
            got[key] = rope.get(key)
        else:
            got[key] = getattr(config, key)
    return got


@pytest.mark.parametrize("name", sorted(TINY_SHAPES))
def test_each_tiny_model_keeps_its_released_configs_structural_options(name):
    config = tiny_config(name, hidden_size=64)
    assert _kept(config, RELEASED[name]) == RELEASED[name]
    assert config.model_type == TINY_SHAPES[name].model_type


def test_the_command_writes_a_released_shape_and_its_help_names_each_released_config(tmp_path, capsys):
    assert main(["tiny-model", str(tmp_path / "v3"), "--family", "deepseek_v3", "--hidden-size", "32"]) == 0
    written = json.loads((tmp_path / "v3" / "config.json").read_text())
    assert (written["q_lora_rank"], written["rope_parameters"]["factor"], written["n_group"]) == (16, 40.0, 2)
    assert written["num_nextn_predict_layers"] == 1  # DeepSeek-V3's checkpoint holds one MTP layer
    with pytest.raises(SystemExit):
        main(["tiny-model", "--help"])
    shown = capsys.readouterr().out
    for name, shape in TINY_SHAPES.items():
        assert f"{name} " in shown and shape.released in shown
