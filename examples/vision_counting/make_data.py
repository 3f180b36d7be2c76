"""Write the vision example's data: 32 x 32 pictures of 1 to 4 coloured squares on a 4 x 4 grid,
each a prompt "<image>How many squares?" whose label is the count.

The pictures travel inside the JSONL as base64 PNGs (the ``images`` key, read with
``--multimodal-keys '{"image": "images"}'``). Deterministic: the same seed gives the same split
(600 train / 100 eval).

    python examples/vision_counting/make_data.py [OUT_DIR]
"""

import base64
import io
import json
import random
import sys
from pathlib import Path

COLORS = [(230, 40, 40), (40, 200, 60), (50, 90, 240), (240, 220, 40)]
CELL, GRID = 8, 4  # 8-pixel squares on a 4 x 4 grid: one square per image token of the tiny VLM


def picture(rng: random.Random, count: int) -> str:
    """A PNG data URL of ``count`` squares in distinct cells, each of a random colour."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (CELL * GRID, CELL * GRID), (0, 0, 0))
    draw = ImageDraw.Draw(image)
    for cell in rng.sample(range(GRID * GRID), count):
        x, y = CELL * (cell % GRID), CELL * (cell // GRID)
        draw.rectangle([x + 1, y + 1, x + CELL - 2, y + CELL - 2], fill=rng.choice(COLORS))
    png = io.BytesIO()
    image.save(png, format="PNG")
    return "data:image/png;base64," + base64.b64encode(png.getvalue()).decode("ascii")


def make_split(seed: int = 0, n_train: int = 600, n_eval: int = 100) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    counts = [rng.randint(1, 4) for _ in range(n_train + n_eval)]
    records = [{"prompt": "<image>How many squares?", "images": [picture(rng, n)], "label": str(n)} for n in counts]
    return records[n_eval:], records[:n_eval]


def main(out_dir: str = str(Path(__file__).parent / "data")) -> None:
    train, evaluation = make_split()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for name, records in (("train", train), ("eval", evaluation)):
        path = Path(out_dir) / f"squares_{name}.jsonl"
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
        print(f"wrote {len(records)} prompts to {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
