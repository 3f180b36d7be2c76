"""Write the tool-use example's data: prompts ``a*b=`` (a in 10..99, b in 2..9) with their products.

Deterministic: the same seed always gives the same split (600 train / 120 eval).

    python examples/tool_use/make_data.py [OUT_DIR]
"""

import json
import random
import sys
from pathlib import Path


def make_split(seed: int = 0, n_eval: int = 120) -> tuple[list[dict], list[dict]]:
    problems = [(a, b) for a in range(10, 100) for b in range(2, 10)]
    random.Random(seed).shuffle(problems)
    records = [{"prompt": f"{a}*{b}=", "label": str(a * b)} for a, b in problems]
    return records[n_eval:], records[:n_eval]


def main(out_dir: str = str(Path(__file__).parent / "data")) -> None:
    train, evaluation = make_split()
    for name, records in (("train", train), ("eval", evaluation)):
        path = Path(out_dir) / f"multiply_{name}.jsonl"
        path.write_text("".join(json.dumps(record) + "\n" for record in records))
        print(f"wrote {len(records)} prompts to {path}")


if __name__ == "__main__":
    main(*sys.argv[1:])
