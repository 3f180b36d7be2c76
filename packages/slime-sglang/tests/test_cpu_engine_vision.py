"""The CPU engine serving a vision-language model (the tiny Qwen2.5-VL): prompts with images,
as SGLang's ``image_data``, and videos (lists of frames), as its ``video_data``, batched
continuously with other prompts (with other images, or none); every token's log-prob equals a
plain transformers forward of that request alone with its images and videos, and images and
videos change what the model says."""

import asyncio
import base64
import io

import pytest
import torch

from slime_core.multimodal.vision_inputs import without_placeholders
from slime_sglang.cpu_engine import batch as batching
from slime_sglang.cpu_engine.engine import load_engine
from slime_sglang.cpu_engine.request import BadRequest, GenerateRequest, SamplingParams


def data_url(color, size=32) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.fixture(scope="module")
def engine(tiny_vlm_dir):
    """The engine as ``slime engine serve`` loads it (its scheduler thread is a daemon)."""
    return load_engine(str(tiny_vlm_dir), max_running_requests=8)


def prompt(engine, text: str, images: list[str], videos: list[list[str]] = ()) -> list[int]:
    """The prompt's ids as the processor makes them (each image and video expanded to its tokens)."""
    from slime_core.multimodal.images import load_image
    from slime_core.multimodal.processor import load_processor
    from slime_core.multimodal.videos import load_video, processor_video_kwargs

    processor = load_processor(engine.model_path)
    parts = [*({"type": "image"} for _ in images), *({"type": "video"} for _ in videos)]
    content = [*parts, {"type": "text", "text": text}]
    rendered = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
    loaded = [load_image(image) for image in images] or None
    clips = [load_video(video) for video in videos]
    with_videos = {"videos": clips, **processor_video_kwargs(clips)} if clips else {}
    return processor(text=[rendered], images=loaded, **with_videos)["input_ids"][0]


def request(engine, rid: str, text: str, images: list[str], videos: list[list[str]] = ()) -> GenerateRequest:
    ids = prompt(engine, text, images, videos)
    made = GenerateRequest(rid=rid, input_ids=ids, params=SamplingParams(temperature=0.0), return_logprob=True)
    return engine.with_images(images or None, [made], list(videos) or None)[0]


def greedy(requests, logits) -> None:
    log_probs = logits.float().log_softmax(-1)
    for r, row in zip(requests, log_probs):
        token = int(row.argmax())
        r.output_ids.append(token)
        r.output_logprobs.append(row[token].item())


def alone(engine, r: GenerateRequest) -> torch.Tensor:
    """The request's output log-probs from one transformers forward of it alone (the model
    computes its own positions from the images), over what the policy may emit (no image
    placeholder: `without_placeholders`)."""
    inputs = {}
    if r.images is not None:
        config = engine.model.config
        prompt_types = [{config.image_token_id: 1, config.video_token_id: 2}.get(t, 0) for t in r.input_ids]
        types = torch.tensor([prompt_types + [0] * len(r.output_ids)])  # output tokens are text
        patches = r.images.patches
        inputs = dict(**patches.model_inputs(), mm_token_type_ids=types)
        if patches.seconds_per_grid is not None:
            inputs["second_per_grid_ts"] = patches.seconds_per_grid
    tokens = r.input_ids + r.output_ids
    with torch.no_grad():
        logits = without_placeholders(
            engine.model(input_ids=torch.tensor([tokens]), **inputs).logits[0], engine.model.config
        )
    chosen = logits[len(r.input_ids) - 1 : -1].log_softmax(-1).gather(-1, torch.tensor(r.output_ids)[:, None])
    return chosen[:, 0]


def test_prompts_with_images_join_and_leave_the_batch_and_score_as_if_alone(engine):
    """a and c: the same ids with other images (not one prefill row); b: two images; d, text
    only, joins after 3 steps, e (an image) after a and c left."""
    red, blue, green = data_url("red"), data_url("blue", 16), data_url("green")
    a, b = request(engine, "a", "hi", [red]), request(engine, "b", "two", [blue, red])
    c = request(engine, "c", "hi", [green])
    model = engine.model
    with torch.no_grad():
        batch, logits = batching.prefill(model, [a, b, c])
        greedy(batch.requests, logits)
        for _ in range(3):
            greedy(batch.requests, batching.decode(model, batch))
        d = request(engine, "d", "no image here", [])
        joining, logits = batching.prefill(model, [d])
        greedy([d], logits)
        batch = batching.merge(batch, joining)
        for _ in range(3):
            greedy(batch.requests, batching.decode(model, batch))
        batch = batching.keep(batch, [1, 3])
        e = request(engine, "e", "?", [red])
        joining, logits = batching.prefill(model, [e])
        greedy([e], logits)
        batch = batching.merge(batch, joining)
        for _ in range(4):
            greedy(batch.requests, batching.decode(model, batch))
    assert a.input_ids == c.input_ids and a.position_offset < 0  # 16 image tokens span 8 x 8 / 2 / 2 -> 4 positions
    for r in (a, b, c, d, e):
        torch.testing.assert_close(torch.tensor(r.output_logprobs), alone(engine, r), atol=1e-4, rtol=1e-4)
    assert a.output_ids != c.output_ids  # the image changes what the model says


def test_prompts_with_videos_join_the_batch_and_score_as_if_alone(engine):
    """v and w: the same ids with other frames; x: an image and a video; t: text only. Over HTTP,
    video_data (SGLang's field, each video a list of frames) answers as the engine's batch did."""
    from aiohttp.test_utils import TestClient, TestServer

    from slime_sglang.cpu_engine.server import create_app

    frames = [data_url(color) for color in ("red", "green", "blue")]
    v = request(engine, "v", "moves?", [], [frames])
    w = request(engine, "w", "moves?", [], [[data_url("white")] * 3])
    x = request(engine, "x", "and?", [data_url("blue", 16)], [[data_url("red", 16)] * 2])
    t = request(engine, "t", "no picture", [])
    with torch.no_grad():
        batch, logits = batching.prefill(engine.model, [v, w, x, t])
        greedy(batch.requests, logits)
        for _ in range(4):
            greedy(batch.requests, batching.decode(engine.model, batch))
    assert v.input_ids == w.input_ids and v.input_ids.count(engine.model.config.video_token_id) == 32
    for r in (v, w, x, t):
        torch.testing.assert_close(torch.tensor(r.output_logprobs), alone(engine, r), atol=1e-4, rtol=1e-4)
    assert v.output_ids != w.output_ids  # the frames change what the model says

    async def post(body):
        async with TestClient(TestServer(create_app(engine))) as client:
            response = await client.post("/generate", json=body)
            return response.status, await response.json()

    params = {"temperature": 0, "max_new_tokens": 5}
    body = {"input_ids": [v.input_ids, t.input_ids], "video_data": [[frames], None], "sampling_params": params}
    status, answers = asyncio.run(post({**body, "return_logprob": True}))
    assert status == 200 and answers[0]["output_ids"] == v.output_ids
    got = [entry[0] for entry in answers[0]["meta_info"]["output_token_logprobs"]]
    assert got == pytest.approx(v.output_logprobs, abs=1e-4)
    status, refused = asyncio.run(
        post({"input_ids": v.input_ids, "video_data": [frames[:1]], "sampling_params": params})
    )
    assert status == 400 and "32 video tokens but its 1 video(s) have 16 features" in str(refused)


def test_image_data_over_http_as_sglang_takes_it(engine, tiny_vlm_dir):
    """/generate with input_ids and image_data (one prompt, and a batch of two with n = 2):
    the answers' log-probs are those of each prompt alone with its images."""
    from aiohttp.test_utils import TestClient, TestServer

    from slime_sglang.cpu_engine.server import create_app

    red, blue = data_url("red"), data_url("blue", 16)
    ids_red, ids_two = prompt(engine, "hi", [red]), prompt(engine, "two", [blue, red])
    params = {"temperature": 0, "max_new_tokens": 5}

    async def post(body):
        async with TestClient(TestServer(create_app(engine))) as client:
            response = await client.post("/generate", json=body)
            return response.status, await response.json()

    status, one = asyncio.run(
        post({"input_ids": ids_red, "image_data": red, "sampling_params": params, "return_logprob": True})
    )
    assert status == 200
    batch = {"input_ids": [ids_red, ids_two], "image_data": [[red], [blue, red]], "return_logprob": True}
    status, answers = asyncio.run(post({**batch, "sampling_params": {**params, "n": 2}}))
    assert status == 200 and len(answers) == 4
    assert [e[0] for e in answers[0]["meta_info"]["output_token_logprobs"]] == pytest.approx(
        [e[0] for e in one["meta_info"]["output_token_logprobs"]], abs=1e-5
    )
    made = request(engine, "x", "two", [blue, red])
    made.output_ids = answers[2]["output_ids"]
    got = [entry[0] for entry in answers[2]["meta_info"]["output_token_logprobs"]]
    torch.testing.assert_close(torch.tensor(got), alone(engine, made), atol=1e-4, rtol=1e-4)
    status, refused = asyncio.run(post({"input_ids": ids_red, "image_data": [red, red], "sampling_params": params}))
    assert status == 400 and "16 image tokens but its 2 image(s) have 32 features" in str(refused)
    without = GenerateRequest(rid="y", input_ids=ids_red, params=SamplingParams(), return_logprob=False)
    with pytest.raises(BadRequest, match="the prompt has 16 image tokens but no image_data"):
        engine.with_images(None, [without])


def rollout_samples(engine, tiny_vlm_dir, data, keys: str, grouped: bool, **options) -> dict:
    """The samples of one default rollout (2 prompts, 2 samples each) on ``data`` with
    ``--multimodal-keys keys`` (and ``options``): data source, generate function, SGLang client
    and engine over HTTP; by (group, index)."""
    from aiohttp.test_utils import TestServer

    from slime_core.data.source import PromptDataSource
    from slime_core.plugins import Plugins
    from slime_core.rollout.default import default_rollout
    from slime_core.rollout.generate import generate_sample
    from slime_core.rollout.parts import GenerateContext, RolloutParts
    from slime_core.rollout.reward_hub import RewardHub
    from slime_core.testing import make_config
    from slime_core.tokenizer import load_tokenizer
    from slime_sglang.client import EngineClient
    from slime_sglang.cpu_engine.server import create_app
    from slime_sglang.engine_group import EngineGroup

    tokenizer = load_tokenizer(str(tiny_vlm_dir))

    async def rollout():
        config = make_config(
            data, tiny_vlm_dir, rollout_batch_size=2, n_samples_per_prompt=2, rollout_max_response_len=4,
            multimodal_keys=keys, apply_chat_template=True, rm_type="math", rollout_shuffle=False,
            rollout_group_requests=grouped, **options,
        )  # fmt: skip
        async with TestServer(create_app(engine)) as server:
            url = str(server.make_url("")).rstrip("/")
            parts = RolloutParts(
                data_source=PromptDataSource.from_config(config, tokenizer),
                reward_hub=RewardHub(config, Plugins()),
                generate=generate_sample,
                group_filter=None,
                ctx=GenerateContext(EngineClient(url), tokenizer, config, per_copy_seeds=True),
                engines=EngineGroup([url]),
            )
            result = await default_rollout(0, config, parts)
            await parts.ctx.engine.close()
        return {(s.group_index, s.index): s for group in result.groups for s in group}

    return asyncio.run(rollout())


def test_the_rollout_sends_each_prompts_images_with_its_tokens(engine, tiny_vlm_dir, tmp_path):
    """The default rollout on prompts with images (--multimodal-keys): data source, generate
    function, SGLang client and engine over HTTP; each group's samples are scored with their
    prompt's images, as one request per group or one per sample alike."""
    import json

    for color in ("red", "blue"):
        (tmp_path / f"{color}.png").write_bytes(base64.b64decode(data_url(color).partition(",")[2]))
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": "<image>?", "images": [str(tmp_path / f"{c}.png")], "label": "1"}) + "\n"
            for c in ("red", "blue")
        )
    )
    keys = '{"image": "images"}'
    grouped = rollout_samples(engine, tiny_vlm_dir, data, keys, True)
    per_sample = rollout_samples(engine, tiny_vlm_dir, data, keys, False)
    assert grouped.keys() == per_sample.keys() and len(grouped) == 4
    for key, sample in grouped.items():
        assert sample.tokens == per_sample[key].tokens and sample.tokens.count(engine.model.config.image_token_id) == 16
        made = request(engine, "check", "?", [encode(sample.multimodal_inputs["images"][0])])
        assert made.input_ids == sample.tokens[: sample.prompt_length]
        made.output_ids = sample.tokens[sample.prompt_length :]
        torch.testing.assert_close(torch.tensor(sample.rollout_log_probs), alone(engine, made), atol=1e-4, rtol=1e-4)


def test_the_rollout_sends_each_prompts_videos_with_its_tokens(engine, tiny_vlm_dir, tmp_path):
    """The same route with videos (--multimodal-keys video, frames as data URLs): each sample is
    scored with its prompt's video (video_data), as the engine scores that video alone."""
    import json

    records = [{"prompt": "<video>?", "videos": [[data_url(c) for c in colors]], "label": "1"} for colors in (
        ("red", "green", "blue"), ("white", "black", "white"))]  # fmt: skip
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    samples = rollout_samples(engine, tiny_vlm_dir, data, '{"video": "videos"}', True, rollout_engine="cpu")
    assert len(samples) == 4
    for (group, _), sample in samples.items():
        assert sample.tokens.count(engine.model.config.video_token_id) == 32
        made = request(engine, "check", "?", [], [records[group]["videos"][0]])
        assert made.input_ids == sample.tokens[: sample.prompt_length]
        made.output_ids = sample.tokens[sample.prompt_length :]
        torch.testing.assert_close(torch.tensor(sample.rollout_log_probs), alone(engine, made), atol=1e-4, rtol=1e-4)


def encode(image) -> str:
    from slime_core.multimodal.images import encode_image

    return encode_image(image)


@pytest.mark.parametrize("family", ["qwen3_5_moe"])
def test_qwen3_5_requests_with_images_join_and_leave_its_hybrid_batch_and_score_as_if_alone(family, tmp_path):
    """Qwen3.5 (the MoE: gated delta-net state and key-value caches in one batch, interleaved
    multimodal rotary over a quarter of each head): a and c, the same ids with other images,
    d (text) joins after 2 steps, e (an image) after a left; each scores as alone."""
    from slime_core.tools.tiny_vlms import build_tiny_vlm

    engine = load_engine(str(build_tiny_vlm(tmp_path, family)), max_running_requests=8)
    red, green = data_url("red"), data_url("green")
    a, c = request(engine, "a", "hi", [red]), request(engine, "c", "hi", [green])
    with torch.no_grad():
        batch, logits = batching.prefill(engine.model, [a, c])
        greedy(batch.requests, logits)
        for _ in range(2):
            greedy(batch.requests, batching.decode(engine.model, batch))
        d = request(engine, "d", "no image", [])
        joining, logits = batching.prefill(engine.model, [d])
        greedy([d], logits)
        batch = batching.keep(batching.merge(batch, joining), [1, 2])
        e = request(engine, "e", "?", [red])
        joining, logits = batching.prefill(engine.model, [e])
        greedy([e], logits)
        batch = batching.merge(batch, joining)
        for _ in range(2):
            greedy(batch.requests, batching.decode(engine.model, batch))
    for r in (a, c, d, e):
        torch.testing.assert_close(torch.tensor(r.output_logprobs), alone(engine, r), atol=1e-4, rtol=1e-4)
    assert a.output_ids != c.output_ids  # the image changes what the model says
