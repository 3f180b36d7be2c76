"""Benchmark slime's math grader against careful human judgements, and against math-verify.

    python benchmarks/math_grader.py [--data benchmarks/data/math_grader_mixed.jsonl]

Each line of the data file is ``{"kind", "label", "response", "human"}``: a realistic model
response, the reference answer, and a human's verdict on whether the response's final
answer is correct. For each grader the script prints gradings per second, agreement with
the human verdicts (with false positives / false negatives), agreement per kind, and every
disagreement.

math-verify is run as ``verify(parse(label), parse(response))``; a label that math-verify's
``parse`` finds nothing in (a bare ``\\frac{1}{2}``) is retried wrapped in ``$...$``, so
both graders see the same reference.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

DEFAULT_DATA = Path(__file__).parent / "data" / "math_grader_mixed.jsonl"


def load(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def slime_grader():
    from slime_rewards.math import grade_math

    return lambda response, label: grade_math(response, label)


def math_verify_grader():
    from math_verify import parse, verify

    def grade(response: str, label: str) -> bool:
        gold = parse(label) or parse(f"${label}$")
        return bool(verify(gold, parse(response)))

    return grade


def evaluate(grade, rows: list[dict]) -> dict:
    """Verdicts, timing and agreement of one grader on all rows."""
    grade(rows[0]["response"], rows[0]["label"])  # warm-up: imports, caches
    verdicts = []
    start = time.perf_counter()
    for row in rows:
        try:
            verdicts.append(bool(grade(row["response"], row["label"])))
        except Exception as error:  # a grader crash counts as "wrong"; it is listed below
            verdicts.append(False)
            row.setdefault("errors", []).append(repr(error))
    seconds = time.perf_counter() - start
    agree = [v == row["human"] for v, row in zip(verdicts, rows)]
    return {
        "verdicts": verdicts,
        "per_second": len(rows) / seconds,
        "agreement": sum(agree) / len(rows),
        "false_pos": sum(v and not r["human"] for v, r in zip(verdicts, rows)),
        "false_neg": sum(r["human"] and not v for v, r in zip(verdicts, rows)),
    }


def report(name: str, result: dict, rows: list[dict]) -> None:
    n = len(rows)
    agreed = round(result["agreement"] * n)
    print(f"\n== {name}")
    print(f"gradings per second : {result['per_second']:.1f}")
    print(f"agreement with human: {agreed}/{n} = {result['agreement']:.1%}")
    print(f"false positives     : {result['false_pos']} (graded right, human says wrong)")
    print(f"false negatives     : {result['false_neg']} (graded wrong, human says right)")
    print("disagreements:")
    for verdict, row in zip(result["verdicts"], rows):
        if verdict != row["human"]:
            tail = row["response"][-90:].replace("\n", " ")
            print(f"  [{row['kind']}] label={row['label']!r} grader={verdict} human={row['human']} ...{tail!r}")


def per_kind(results: dict[str, dict], rows: list[dict]) -> None:
    kinds = defaultdict(list)
    for i, row in enumerate(rows):
        kinds[row["kind"]].append(i)
    names = list(results)
    print("\n== agreement per kind (" + " | ".join(names) + ")")
    for kind, idx in sorted(kinds.items()):
        cells = []
        for name in names:
            verdicts = results[name]["verdicts"]
            cells.append(f"{sum(verdicts[i] == rows[i]['human'] for i in idx)}/{len(idx)}")
        print(f"  {kind:18s} " + "  ".join(f"{c:>6s}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    rows = load(args.data)
    print(f"{len(rows)} responses from {args.data} ({sum(r['human'] for r in rows)} judged correct)")
    results = {
        "slime math grader": evaluate(slime_grader(), rows),
        "math-verify alone": evaluate(math_verify_grader(), rows),
    }
    for name, result in results.items():
        report(name, result, rows)
    per_kind(results, rows)


if __name__ == "__main__":
    main()
