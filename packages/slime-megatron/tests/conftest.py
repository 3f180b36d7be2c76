"""Fixtures of slime-megatron's tests: tiny Hugging Face models of each supported family,
and megatron ranks in spawned gloo processes (CPU mode)."""

import inspect
from types import SimpleNamespace

import pytest
import torch

from slime_megatron.processes import run_on_ranks

#: Tiny configs of each family (about 0.05 M parameters): 4 query / 2 key-value heads,
#: untied output layers where the family allows, Llama 3.1 rope scaling, and a Qwen3-MoE
#: with 4 experts (top 2) whose second layer is dense.
TINY_CONFIGS = {
    "qwen2": dict(tie_word_embeddings=False),
    "qwen3": dict(head_dim=8, tie_word_embeddings=True),
    "llama": dict(
        tie_word_embeddings=False,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
    ),
    "qwen3_moe": dict(
        head_dim=8,
        tie_word_embeddings=False,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        norm_topk_prob=True,
        mlp_only_layers=[1],
    ),
}


def tiny_hf_config(model_type: str):
    """A transformers config of ``model_type`` from `TINY_CONFIGS`."""
    from transformers import AutoConfig

    return AutoConfig.for_model(
        model_type,
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-6,
        **TINY_CONFIGS[model_type],
    )


def tiny_hf_model(model_type: str, seed: int = 0):
    """A randomly initialised (fixed seed) float32 causal LM of ``model_type``; norms are
    randomised too, so a converter that mixes up norm weights fails."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_hf_config(model_type), attn_implementation="eager").eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model


@pytest.fixture(params=sorted(TINY_CONFIGS))
def model_type(request):
    return request.param


@pytest.fixture(scope="session")
def tiny_hf():
    """``tiny_hf.config(model_type)`` / ``tiny_hf.model(model_type, seed=0)``: see above."""
    return SimpleNamespace(config=tiny_hf_config, model=tiny_hf_model)


@pytest.fixture(scope="session")
def tiny_moe_model_dir(tmp_path_factory):
    """The tiny Qwen3-MoE of `TINY_CONFIGS` with the character tokenizer, saved once."""
    from slime_core.tools.tiny_models import build_char_tokenizer

    model_dir = tmp_path_factory.mktemp("tiny-qwen3-moe")
    tiny_hf_model("qwen3_moe").save_pretrained(model_dir)
    build_char_tokenizer(model_dir)
    return model_dir


def parallel_sizes(
    tp: int = 1, ep: int = 1, etp: int | None = None, pp: int = 1, cp: int = 1, **options
) -> SimpleNamespace:
    """The Megatron options ``init_parallel`` and ``build_model`` read (other options by key)."""
    return SimpleNamespace(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        context_parallel_size=cp,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
        seed=1234,
        **options,
    )


@pytest.fixture(scope="session")
def run_ranks(rank_pool):
    """``run_ranks(fn, world_size, *args, tp=1, ep=1, etp=None, pp=1, cp=1, **options) -> [result
    of each rank]``: runs ``fn(rank, sizes, *args)`` on ``world_size`` spawned processes
    joined by gloo, with megatron's parallel groups for ``sizes`` (see `parallel_sizes`), in
    CPU mode; ``fn`` (a test module's function) is loaded from its file in each child. The
    processes are the session's `rank_pool`: spawned once, not per call."""

    def run(fn, world_size: int, *args, **sizes) -> list:
        return run_on_ranks(
            (inspect.getsourcefile(fn), fn.__name__), world_size, parallel_sizes(**sizes), *args, pool=rank_pool
        )

    return run
