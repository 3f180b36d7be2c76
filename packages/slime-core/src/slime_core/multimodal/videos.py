"""Videos as lists of their frames: in data records (under the ``--multimodal-keys`` key of the
``video`` type, or a ``{"type": "video", "video": [...]}`` message part), on the wire to the
CPU engine (``video_data``) and in `Sample.multimodal_inputs` (``"videos"``, slime's field).

A video is a list of frames, each anything `slime_core.multimodal.images.load_image` takes (a
path, a ``file://`` or ``data:image/...;base64,`` URL, bare base64, a Parquet image cell, a PIL
image), all of one size, taken as sampled at `FRAMES_PER_SECOND` (qwen-vl-utils' default
rate; Qwen3-VL writes each frame pair's time into the prompt, Qwen2.5-VL spaces its temporal
rotary positions by it). Video files (mp4, ...) are not decoded: that needs torchcodec, decord
or PyAV, and the frames a model is shown should be chosen where the data is made.
"""

from __future__ import annotations

from typing import Any

from slime_core.multimodal.images import ImageError, encode_image, load_image

#: the rate the frames of a video are taken as sampled at (frames per second)
FRAMES_PER_SECOND = 2.0


class VideoError(ImageError):
    """A video reference that does not give a list of frames of one size; the message says why."""


def load_video(ref: Any) -> list:
    """The RGB PIL frames of the video ``ref`` (a list of frame references), all of one size."""
    if not isinstance(ref, (list, tuple)):
        shown = str(ref)[:60] + ("..." if len(str(ref)) > 60 else "")
        raise VideoError(
            f"video '{shown}' is not a list of frames: a video is given as the list of its frames (image paths, "
            'file:// or data: URLs, base64), e.g. [["f0.png", "f1.png"]] for one video of two frames; video files '
            f"are not decoded (extract frames at {FRAMES_PER_SECOND:g} per second, e.g. "
            f"`ffmpeg -i clip.mp4 -vf fps={FRAMES_PER_SECOND:g} f%03d.png`, and list them)"
        )
    frames = [load_image(frame) for frame in ref]
    if not frames:
        raise VideoError("a video has no frames; give at least one")
    sizes = {frame.size for frame in frames}
    if len(sizes) > 1:
        raise VideoError(
            f"a video's frames differ in size ({', '.join(f'{w}x{h}' for w, h in sorted(sizes))}); "
            "resize them to one size"
        )
    return frames


def encode_video(ref: Any) -> list[str]:
    """The video ``ref`` as its frames' ``data:image/png;base64,...`` URLs (what the CPU engine's
    ``video_data`` takes for one video)."""
    if isinstance(ref, (list, tuple)) and all(isinstance(f, str) and f.startswith("data:image/") for f in ref):
        return list(ref)
    return [encode_image(frame) for frame in load_video(ref)]


def video_data(sample) -> dict[str, list[list[str]]]:
    """The engine's keyword arguments for ``sample``'s videos: ``{"video_data": [[frame data URL,
    ...], ...]}`` (SGLang's field, one list of frames per video), or none without videos."""
    videos = (sample.multimodal_inputs or {}).get("videos")
    return {"video_data": [encode_video(video) for video in videos]} if videos else {}


def processor_video_kwargs(videos: list[list]) -> dict[str, Any]:
    """What a model's processor (and a torchvision video processor) is told of ``videos`` (lists of
    PIL frames): they are sampled already, at `FRAMES_PER_SECOND` (Qwen3-VL's frame timestamps and
    Qwen2.5-VL's temporal positions follow it; its own default sampling would drop frames)."""
    metadata = [
        {"total_num_frames": len(frames), "fps": FRAMES_PER_SECOND, "frames_indices": list(range(len(frames)))}
        for frames in videos
    ]
    return {"video_metadata": metadata, "do_sample_frames": False}
