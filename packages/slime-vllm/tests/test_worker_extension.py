"""The worker extension's staging of buckets that split a layer (`slime_vllm.worker_extension`):
a group (a decoder layer, or a module outside the layers) is reloaded only once all of its
tensors have arrived, in one reload. The reload itself is vLLM's (the recorder below stands in
for vLLM's model runner); ``test_vllm_runs.py`` checks the served weights on a real server."""

from types import SimpleNamespace

import torch
from safetensors.torch import save_file

from slime_vllm.worker_extension import SlimeWorkerExtension, group_of

NAMES = [
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.mlp.experts.3.up_proj.weight",
    "model.layers.1.self_attn.q_proj.weight",
    "model.norm.weight",
]


def test_a_group_is_its_decoder_layer_or_else_its_module():
    assert group_of("model.layers.0.mlp.experts.3.up_proj.weight") == "model.layers.0"
    assert group_of("model.embed_tokens.weight") == "model.embed_tokens"
    assert group_of("lm_head.weight") == "lm_head"


def test_a_layer_split_over_buckets_is_reloaded_once_it_is_whole(tmp_path):
    save_file({name: torch.zeros(2) for name in NAMES}, str(tmp_path / "model.safetensors"))
    reloads = []
    runner = SimpleNamespace(
        model_config=SimpleNamespace(model=str(tmp_path), hf_text_config=SimpleNamespace(tie_word_embeddings=False)),
        reload_weights=lambda weights_iterator, is_checkpoint_format: reloads.append(
            sorted(name for name, _ in weights_iterator)
        ),
        get_model=lambda: SimpleNamespace(lm_head=None),
    )
    worker = SlimeWorkerExtension()
    worker.model_runner = runner
    one = torch.ones(2)
    worker._slime_load_parts([(NAMES[0], one), (NAMES[1], one)])  # the embedding whole, layer 0 in part
    worker._slime_load_parts([(NAMES[2], one)])  # layer 0 still in part
    worker._slime_load_parts([(NAMES[3], one), (NAMES[4], one), (NAMES[5], one), ("lm_head.weight", one)])
    assert reloads == [
        [NAMES[0]],
        sorted([NAMES[1], NAMES[2], NAMES[3], NAMES[4], NAMES[5], "lm_head.weight"]),
    ]
    assert worker._slime_staged == {}
