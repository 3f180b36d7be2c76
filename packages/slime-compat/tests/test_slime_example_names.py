"""Every ``slime.*`` name slime's example functions import resolves here, and the helpers added
for them behave as slime's: processing utils, `SingletonMeta`, `get_rollout_num_engines`, the
boxed-answer grader, the context-parallel log-prob helpers, and the coding-agent names (which
need E2B and say so)."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import httpx
import numpy as np
import pytest
import torch

#: (module, name) pairs imported by THUDM/slime 624b824a's examples/*/*.py example functions and by the
#: slime/rollout modules a user copies (fully_async_rollout, on_policy_distillation, sft_rollout), found with
#: grep -rhE "^\s*(from slime[a-z_.]* import|import slime)" examples slime/rollout; its launch scripts'
#: helpers (slime.utils.external_utils.command_utils) are not example functions
SLIME_EXAMPLE_IMPORTS = [
    ("slime.agent", "sandbox"),
    ("slime.agent.adapters", "AnthropicAdapter"),
    ("slime.agent.adapters", "OpenAIAdapter"),
    ("slime.agent.adapters.common", "flatten_content"),
    ("slime.agent.aiohttp_threaded", "FilteredAccessLogger"),
    ("slime.agent.aiohttp_threaded", "run_app_in_thread"),
    ("slime.agent.harness", "ClaudeCodeHarness"),
    ("slime.agent.harness", "CodexHarness"),
    ("slime.agent.sandbox", "E2BSandbox"),
    ("slime.agent.sandbox", "Sandbox"),
    ("slime.agent.sandbox", "exec_and_wait"),
    ("slime.backends.megatron_utils.cp_utils", "all_gather_with_cp"),
    ("slime.backends.megatron_utils.cp_utils", "slice_log_prob_with_cp"),
    ("slime.rollout.base_types", "RolloutFnEvalOutput"),
    ("slime.rollout.base_types", "RolloutFnTrainOutput"),
    ("slime.rollout.filter_hub.base_types", "DynamicFilterOutput"),
    ("slime.rollout.rm_hub", "batched_async_rm"),
    ("slime.rollout.rm_hub", "grade_answer_verl"),
    ("slime.rollout.rm_hub.math_dapo_utils", "compute_score"),
    ("slime.rollout.rm_hub.math_utils", "extract_answer"),
    ("slime.rollout.sglang_rollout", "GenerateState"),
    ("slime.rollout.sglang_rollout", "generate"),
    ("slime.rollout.sglang_rollout", "generate_and_rm_group"),
    ("slime.utils", "http_utils"),
    ("slime.utils.async_utils", "run"),
    ("slime.utils.http_utils", "get"),
    ("slime.utils.http_utils", "get_rollout_num_engines"),
    ("slime.utils.http_utils", "post"),
    ("slime.utils.mask_utils", "MultiTurnLossMaskGenerator"),
    ("slime.utils.misc", "SingletonMeta"),
    ("slime.utils.misc", "load_function"),
    ("slime.utils.processing_utils", "build_processor_kwargs"),
    ("slime.utils.processing_utils", "encode_image_for_rollout_engine"),
    ("slime.utils.processing_utils", "load_processor"),
    ("slime.utils.processing_utils", "load_tokenizer"),
    ("slime.utils.types", "Sample"),
]


@pytest.mark.parametrize("module, name", SLIME_EXAMPLE_IMPORTS)
def test_every_name_slime_s_examples_import_resolves(module, name):
    exec(f"from {module} import {name}", {})  # as the example's line does (a submodule name included)


def test_processing_utils_load_the_tokenizer_and_no_processor_for_a_text_model(tiny_model_dir):
    from slime.utils.processing_utils import build_processor_kwargs, load_processor, load_tokenizer

    assert load_tokenizer(str(tiny_model_dir)).encode("ab")
    assert load_processor(str(tiny_model_dir)) is None  # a text-only model: its tokenizer is no processor
    kwargs = build_processor_kwargs({"images": ["i"], "images_kwargs": {"max_pixels": 4}})
    assert kwargs["images"] == ["i"] and kwargs["images_kwargs"] == {"max_pixels": 4, "return_tensors": "pt"}
    assert kwargs["text_kwargs"] == {"return_tensors": None, "return_mm_token_type_ids": False}
    assert kwargs["videos_kwargs"] == kwargs["audio_kwargs"] == {"return_tensors": "pt"}


def test_processing_utils_load_a_vlms_processor_as_slimes_geo3k_functions_call_it(tiny_vlm_dir):
    """slime's geo3k rollout: the processor on the chat-templated text and the images
    (build_processor_kwargs), and each image sent to the engine as encode_image_for_rollout_engine
    makes it; the prompt ids are those our data source makes for the same record."""
    from PIL import Image

    from slime.utils.processing_utils import build_processor_kwargs, encode_image_for_rollout_engine, load_processor
    from slime_core.multimodal.images import encode_image

    processor = load_processor(str(tiny_vlm_dir))
    image = Image.new("RGB", (32, 32), "red")
    messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "?"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    output = processor(text=text, **build_processor_kwargs({"images": [image]}))
    assert output["input_ids"][0].count(processor.image_token_id) == 16 and output["pixel_values"].shape[0] == 64
    assert encode_image_for_rollout_engine(image) == encode_image(image)
    # its first turn calls the processor as it comes, and torch.cat's the features of each turn (tensors only)
    first = processor(text=text, images=[image])
    assert first["input_ids"][0] == output["input_ids"][0]
    assert all(isinstance(first[key], torch.Tensor) for key in ("pixel_values", "image_grid_thw"))
    assert isinstance(processor(text=text, images=[image], return_tensors="np")["pixel_values"], np.ndarray)


def test_a_sample_s_train_inputs_stay_out_of_its_dict_and_must_count_its_images():
    """``multimodal_train_inputs`` hold tensors: ``to_dict`` (saved rollouts) leaves them out; a slime
    function's train inputs for more images than the sample carries are refused."""
    from PIL import Image

    from slime.utils.types import Sample
    from slime_compat.generate import check_train_pictures

    image = Image.new("RGB", (8, 8), "red")
    train_inputs = {"pixel_values": torch.zeros(8, 96), "image_grid_thw": torch.tensor([[1, 2, 2], [1, 2, 2]])}
    sample = Sample(prompt="q", multimodal_inputs={"images": [image]}, multimodal_train_inputs=train_inputs)
    assert "multimodal_train_inputs" not in json.dumps(sample.to_dict())
    with pytest.raises(
        ValueError, match=r"multimodal_train_inputs for 2 images but 1 in multimodal_inputs\['images'\]"
    ):
        check_train_pictures(sample, "pkg.generate")
    sample.multimodal_inputs["images"].append(image)
    check_train_pictures(sample, "pkg.generate")


def test_an_image_is_encoded_as_an_rgb_png_data_url():
    image_module = pytest.importorskip("PIL.Image")
    from slime.utils.processing_utils import encode_image_for_rollout_engine

    url = encode_image_for_rollout_engine(image_module.new("L", (3, 2), color=7))
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix)
    decoded = image_module.open(io.BytesIO(base64.b64decode(url[len(prefix) :])))
    assert (decoded.format, decoded.mode, decoded.size, decoded.getpixel((0, 0))) == ("PNG", "RGB", (3, 2), (7, 7, 7))


def test_singleton_meta_get_rollout_num_engines_and_the_boxed_grader():
    from slime.rollout.rm_hub import grade_answer_verl
    from slime.rollout.rm_hub.math_utils import extract_answer
    from slime.utils.http_utils import get_rollout_num_engines
    from slime.utils.misc import SingletonMeta

    class Pool(metaclass=SingletonMeta):
        def __init__(self, size):
            self.size = size

    assert Pool(1) is Pool(2) and Pool(3).size == 1
    Pool.clear_instances()
    assert Pool(4).size == 4

    class Args:
        rollout_num_gpus, rollout_num_gpus_per_engine = 4, 2

    assert get_rollout_num_engines(Args) == 2
    Args.rollout_num_engines = 3
    assert get_rollout_num_engines(Args) == 3
    assert extract_answer(r"so \boxed{\frac{1}{2}}.") == r"\frac{1}{2}" and extract_answer("2") is None
    assert grade_answer_verl(r"it is \boxed{\frac{1}{2}}", r"\boxed{0.5}")
    assert not grade_answer_verl("it is 1/2", "0.5") and not grade_answer_verl(r"\boxed{1}", "")


def test_cp_helpers_see_whole_responses_here():
    torch = pytest.importorskip("torch")
    from slime.backends.megatron_utils.cp_utils import all_gather_with_cp, slice_log_prob_with_cp

    log_probs = torch.tensor([-0.1, -0.2, -0.3])
    assert all_gather_with_cp(log_probs, 7, 3) is log_probs
    assert slice_log_prob_with_cp([-0.1, -0.2], 5, 2) == [-0.1, -0.2]
    with pytest.raises(ValueError, match="2 log-probs for a response of 3 tokens"):
        slice_log_prob_with_cp([-0.1, -0.2], 5, 3)


def test_coding_agent_names_raise_naming_e2b_and_the_generic_helpers_work():
    from aiohttp import web

    from slime.agent.adapters import OpenAIAdapter
    from slime.agent.adapters.common import flatten_content
    from slime.agent.aiohttp_threaded import FilteredAccessLogger, run_app_in_thread
    from slime.agent.harness import CodexHarness
    from slime.agent.sandbox import E2BSandbox, exec_and_wait

    for cls in (OpenAIAdapter, CodexHarness, E2BSandbox):
        with pytest.raises(RuntimeError, match=f"{cls.__name__} is not provided by slime-compat: .*E2B"):
            cls()
    with pytest.raises(RuntimeError, match="exec_and_wait is not provided .*E2B_API_KEY"):
        asyncio.run(exec_and_wait(None, cmd="ls", time_budget_sec=1, tag="t"))
    content = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "tool_result", "content": "b"}, "c"]
    assert flatten_content(content) == "a\n[image omitted]\nb\nc" and flatten_content(None) == ""

    async def ping(request):
        return web.Response(text="pong")

    app = web.Application()
    app.router.add_get("/ping", ping)
    handle = run_app_in_thread(app, host="127.0.0.1", runner_kwargs={"access_log_class": FilteredAccessLogger})
    try:
        assert httpx.get(f"http://127.0.0.1:{handle.port}/ping").text == "pong"
    finally:
        handle.stop()
    assert not handle.thread.is_alive()
