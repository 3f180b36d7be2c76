"""The FSDP backend trains a vision-language model (the tiny Qwen2.5-VL) on samples whose
prompts hold images (or videos): its log-probs over the response tokens equal the CPU engine's
for the same images, packed or padded, before a train step and again after its weights are
pushed to the engine; a resumed rank scores as the one that saved. A multi-turn sample whose
second turn shows another picture is scored as the engine generated it."""

import base64
import io
from functools import partial

import pytest
import torch

from slime_core.config import ConfigError
from slime_core.rollout_batch import RolloutBatch
from slime_core.testing import destroy_default_group, make_config
from slime_core.train_backend import TrainGroup
from slime_fsdp.rank import FSDPTrainRank
from slime_sglang.cpu_engine import batch as batching
from slime_sglang.cpu_engine.engine import load_engine
from slime_sglang.cpu_engine.request import GenerateRequest, SamplingParams
from slime_sglang.cpu_engine.weights import apply_update

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def data_url(color, size=32) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def rollout(
    engine, images_per_prompt: list[list[str]], steps: int = 5, videos_per_prompt: list[list[list[str]]] | None = None
) -> tuple[RolloutBatch, list[list[float]]]:
    """Two samples per prompt, drawn by the engine's running batch (temperature 1, seeded); the
    batch as the trainer gets it, and the engine's log-probs. ``videos_per_prompt``: each
    prompt's videos (lists of frames) after its images."""
    from slime_core.multimodal.processor import load_processor
    from slime_core.multimodal.videos import load_video, processor_video_kwargs

    processor = load_processor(engine.model_path)
    videos_per_prompt = videos_per_prompt or [[] for _ in images_per_prompt]
    requests = []
    for group, (images, videos) in enumerate(zip(images_per_prompt, videos_per_prompt)):
        parts = [*({"type": "image"} for _ in images), *({"type": "video"} for _ in videos)]
        content = [*parts, {"type": "text", "text": "how many?"}]
        text = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        loaded = [__import__("slime_core.multimodal.images").multimodal.images.load_image(i) for i in images] or None
        clips = [load_video(video) for video in videos]
        with_videos = {"videos": clips, **processor_video_kwargs(clips)} if clips else {}
        ids = processor(text=[text], images=loaded, **with_videos)["input_ids"][0]
        for index in range(2):
            params = SamplingParams(temperature=1.0, sampling_seed=10 * group + index)
            made = GenerateRequest(rid=f"{group}-{index}", input_ids=ids, params=params, return_logprob=True)
            made.generator = torch.Generator().manual_seed(10 * group + index)
            requests.append(engine.with_images(images or None, [made], videos or None)[0])
    with torch.no_grad():
        batch, logits = batching.prefill(engine.model, requests)
        for step in range(steps):
            for r, row in zip(requests, logits.float().log_softmax(-1)):
                token = int(torch.multinomial(row.exp(), 1, generator=r.generator))
                r.output_ids.append(token)
                r.output_logprobs.append(row[token].item())
            if step < steps - 1:
                logits = batching.decode(engine.model, batch)
    train = RolloutBatch(
        tokens=[r.input_ids + r.output_ids for r in requests],
        response_lengths=[steps] * len(requests),
        loss_masks=[[1] * steps for _ in requests],
        rewards=[1.0, 0.0, 0.0, 1.0][: len(requests)],
        group_ids=[i // 2 for i in range(len(requests))],
        rollout_log_probs=[r.output_logprobs for r in requests],
        images=[images or None for images in images_per_prompt for _ in range(2)],
        videos=[videos or None for videos in videos_per_prompt for _ in range(2)] if any(videos_per_prompt) else None,
    )
    return train, [r.output_logprobs for r in requests]


def multi_turn(engine, first: str, later: str) -> tuple[RolloutBatch, list[float]]:
    """One two-turn sample: the model answers about ``first``, the environment shows it ``later``
    (a user turn with that picture, loss mask 0), and it answers again, its second request
    carrying both images; the batch and the engine's log-probs of the trained tokens."""
    from slime_core.multimodal.images import load_image
    from slime_core.multimodal.processor import load_processor

    processor = load_processor(engine.model_path)

    def turn(text: str, image: str) -> list[int]:
        content = [{"type": "image"}, {"type": "text", "text": text}]
        rendered = processor.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        return processor(text=[rendered], images=[load_image(image)])["input_ids"][0]

    def answer(ids: list[int], images: list[str]) -> tuple[list[int], list[float]]:
        made = GenerateRequest(rid="m", input_ids=ids, params=SamplingParams(temperature=0.0), return_logprob=True)
        made = engine.with_images(images, [made])[0]
        with torch.no_grad():
            batch, logits = batching.prefill(engine.model, [made])
            for _ in range(3):
                row = logits[0].float().log_softmax(-1)
                made.output_ids.append(int(row.argmax()))
                made.output_logprobs.append(row[made.output_ids[-1]].item())
                logits = batching.decode(engine.model, batch)
        return made.output_ids, made.output_logprobs

    prompt = turn("how many?", first)
    out1, lp1 = answer(prompt, [first])
    shown = turn("and now?", later)
    out2, lp2 = answer(prompt + out1 + shown, [first, later])
    mask = [1] * 3 + [0] * len(shown) + [1] * 3
    batch = RolloutBatch(
        tokens=[prompt + out1 + shown + out2],
        response_lengths=[len(mask)],
        loss_masks=[mask],
        rewards=[1.0],
        group_ids=[0],
        rollout_log_probs=[lp1 + [0.0] * len(shown) + lp2],
        images=[[first, later]],
    )
    return batch, lp1 + lp2


def trained_tokens(log_probs: list[float], mask: list[int]) -> list[float]:
    return [lp for lp, trained in zip(log_probs, mask) if trained]


def close(got: list[list[float]], want: list[list[float]]) -> None:
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), atol=2e-4, rtol=2e-4)


def test_the_trainer_scores_images_as_the_engine_and_trains_and_resumes(tiny_vlm_dir, tmp_path):
    engine = load_engine(str(tiny_vlm_dir), max_running_requests=8)
    red, blue = data_url("red"), data_url("blue", 16)
    batch, engine_log_probs = rollout(engine, [[red], [blue, red]])
    turns, turns_log_probs = multi_turn(engine, red, blue)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x", "label": "1"}\n')
    options = dict(
        train_backend="fsdp", rollout_batch_size=2, n_samples_per_prompt=2, lr=3e-3, rollout_max_response_len=8
    )
    try:
        padded = TrainGroup(
            FSDPTrainRank, make_config(prompts, tiny_vlm_dir, micro_batch_size=2, **options), 1, in_process=True
        )
        padded.init()
        close(padded.compute_log_probs(batch), engine_log_probs)
    finally:
        destroy_default_group()
    config = make_config(
        prompts,
        tiny_vlm_dir,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=1024,
        save=str(tmp_path / "ckpt"),
        **options,
    )
    try:
        group = TrainGroup(FSDPTrainRank, config, 1, in_process=True)
        group.init()
        close(group.compute_log_probs(batch), engine_log_probs)  # packed: images stay with their samples
        # a picture added in a later turn: scored where the model saw it
        close([trained_tokens(group.compute_log_probs(turns)[0], turns.loss_masks[0])], [turns_log_probs])
        metrics = group.train(0, batch)
        assert metrics and all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
        trained = group.compute_log_probs(batch)
        assert torch.tensor(trained).sub(torch.tensor(engine_log_probs)).abs().max() > 1e-3  # the weights moved
        pushed = [(name, tensor) for bucket in group.export_weights(1 << 20) for name, tensor in bucket]
        assert any(name.startswith("model.visual.") for name, _ in pushed)  # the vision tower trains too
        group.save(0)
    finally:
        destroy_default_group()
    apply_update(engine.model, pushed)
    after, engine_after = rollout(engine, [[red], [blue, red]])
    try:
        resumed = TrainGroup(
            FSDPTrainRank,
            make_config(
                prompts,
                tiny_vlm_dir,
                use_dynamic_batch_size=True,
                max_tokens_per_gpu=1024,
                load=str(tmp_path / "ckpt"),
                **options,
            ),
            1,
            in_process=True,
        )
        assert resumed.init()["rollout_id"] == 1
        close(resumed.compute_log_probs(after), engine_after)  # the engine after the push = the resumed trainer
        close(resumed.compute_log_probs(batch), trained)
    finally:
        destroy_default_group()


def test_the_trainer_scores_videos_as_the_engine_before_and_after_a_push(tiny_vlm_dir, tmp_path):
    """Prompts with a video (frames), one with an image too, packed: the trainer's log-probs are
    the engine's; after a train step and the push of its weights, the engine's again."""
    engine = load_engine(str(tiny_vlm_dir), max_running_requests=8)
    frames = [data_url(color) for color in ("red", "green", "blue")]
    pictures = ([[], [data_url("blue", 16)]], [[frames], [[data_url("white")] * 2]])
    batch, engine_log_probs = rollout(engine, pictures[0], videos_per_prompt=pictures[1])
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x", "label": "1"}\n')
    config = make_config(
        prompts, tiny_vlm_dir, train_backend="fsdp", rollout_batch_size=2, n_samples_per_prompt=2, lr=3e-3,
        use_dynamic_batch_size=True, max_tokens_per_gpu=1024,
    )  # fmt: skip
    again = partial(rollout, engine, pictures[0], videos_per_prompt=pictures[1])
    scores_as_the_engine_before_and_after_a_push(config, engine, (batch, engine_log_probs), again)


def scores_as_the_engine_before_and_after_a_push(config, engine, scored, again) -> None:
    """A one-rank FSDP trainer scores ``scored`` (a batch and the engine's log-probs of it) as the
    engine did; after a train step on it and the push of its weights into ``engine``, a new rollout
    (``again()``) is scored as the engine scores it, and the engine's log-probs moved."""
    batch, engine_log_probs = scored
    try:
        group = TrainGroup(FSDPTrainRank, config, 1, in_process=True)
        group.init()
        close(group.compute_log_probs(batch), engine_log_probs)
        group.train(0, batch)
        apply_update(engine.model, list(exported(group).items()))
        after, engine_after = again()
        close(group.compute_log_probs(after), engine_after)
        assert torch.tensor(engine_after).sub(torch.tensor(engine_log_probs)).abs().max() > 1e-3  # the weights moved
    finally:
        destroy_default_group()


def exported(group) -> dict[str, torch.Tensor]:
    """The weights ``group`` pushes to the engines, by Hugging Face name."""
    return {name: tensor.clone() for bucket in group.export_weights(1 << 20) for name, tensor in bucket}


def test_a_frozen_vision_tower_stays_bit_identical_and_the_push_keeps_the_engine_equal(tiny_vlm_dir, tmp_path):
    """``--freeze-params-name-list model.visual`` (the tower's prefix in both tiny families): a
    train step moves the language model and leaves every tower weight bit for bit; the push
    (all weights) leaves the engine scoring as the trainer, as ``--check-weight-update-equal``
    checks in a run."""
    engine = load_engine(str(tiny_vlm_dir), max_running_requests=8)
    batch, _ = rollout(engine, [[data_url("red")], [data_url("blue", 16), data_url("red")]])
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x", "label": "1"}\n')
    config = make_config(
        prompts,
        tiny_vlm_dir,
        train_backend="fsdp",
        rollout_batch_size=2,
        n_samples_per_prompt=2,
        lr=3e-3,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=1024,
        freeze_params_name_list=["model.visual"],
    )
    try:
        group = TrainGroup(FSDPTrainRank, config, 1, in_process=True)
        group.init()
        before = exported(group)
        group.train(0, batch)
        after = exported(group)
        tower = [name for name in before if name.startswith("model.visual.")]
        assert tower and all(torch.equal(before[name], after[name]) for name in tower)
        assert all(not torch.equal(before[n], after[n]) for n in before if n.startswith("model.language_model.layers"))
        apply_update(engine.model, list(after.items()))
        again, engine_again = rollout(engine, [[data_url("red")], [data_url("blue", 16), data_url("red")]])
        close(group.compute_log_probs(again), engine_again)
    finally:
        destroy_default_group()


def test_the_ppo_critic_of_a_vlm_sees_the_images(tiny_vlm_dir, tmp_path):
    """The critic packs each sample's images with it as the policy does: after a value step,
    the same prompt text with a red or a blue picture gets a different value."""
    from slime_fsdp.critic import FSDPCriticRank

    engine = load_engine(str(tiny_vlm_dir), max_running_requests=8)
    batch, _ = rollout(engine, [[data_url("red")], [data_url("blue")]])
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x", "label": "1"}\n')
    config = make_config(
        prompts,
        tiny_vlm_dir,
        train_backend="fsdp",
        advantage_estimator="ppo",
        rollout_batch_size=2,
        n_samples_per_prompt=2,
        lr=3e-3,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=1024,
    )
    try:
        critic = TrainGroup(FSDPCriticRank, config, 1, in_process=True)
        critic.init()
        critic.train_critic(0, batch)
        first = [values[0] for values in critic.compute_values(batch)]  # read at the prompt's last token
    finally:
        destroy_default_group()
    assert first[0] == pytest.approx(first[1], abs=1e-6)  # the same prompt and picture
    assert abs(first[0] - first[2]) > 1e-4  # another picture


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_5_moe"])
def test_qwen3_5_trains_padded_and_the_push_keeps_the_engine_equal(family, tmp_path):
    """Qwen3.5 (gated delta-net layers with full attention, dense or MoE) on prompts with images:
    the trainer scores as the engine, one padded row per sample (packing, which would carry the
    linear attention's state across samples, is refused when the run is configured), and again
    after a train step and the push."""
    from slime_core.tools.tiny_vlms import build_tiny_vlm
    from slime_fsdp.model import load_model

    model_dir = build_tiny_vlm(tmp_path / family, family)
    with torch.no_grad():  # the trainer's forwards build no caches (its text model reads its own use_cache)
        assert load_model(str(model_dir))(input_ids=torch.tensor([[5, 6, 7]])).get("cache") is None
    engine = load_engine(str(model_dir), max_running_requests=8)
    pictures = [[data_url("red")], [data_url("blue", 16), data_url("red")]]
    batch, engine_log_probs = rollout(engine, pictures, steps=3)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "x", "label": "1"}\n')
    config = make_config(
        prompts, model_dir, train_backend="fsdp", rollout_batch_size=2, n_samples_per_prompt=2, lr=3e-3,
        micro_batch_size=2,
    )  # fmt: skip
    with pytest.raises(ConfigError, match="linear-attention layers, whose recurrent state would flow"):
        make_config(
            prompts, model_dir, train_backend="fsdp", rollout_batch_size=2, use_dynamic_batch_size=True,
            max_tokens_per_gpu=1024,
        )  # fmt: skip
    again = partial(rollout, engine, pictures, steps=3)
    scores_as_the_engine_before_and_after_a_push(config, engine, (batch, engine_log_probs), again)
