"""Writes train.jsonl (40 rows) and eval.jsonl (16 rows): "What is A + B?", A and B in 10..49, seeded, no pair twice.

Run:  python make.py
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    rng = random.Random(56)
    pairs = rng.sample([(a, b) for a in range(10, 50) for b in range(10, 50)], 56)
    rows = [{"id": f"add-{i}", "prompt": f"What is {a} + {b}?", "a": a, "b": b, "answer": str(a + b)}
            for i, (a, b) in enumerate(pairs)]
    for name, part in (("train.jsonl", rows[:40]), ("eval.jsonl", rows[40:])):
        (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in part))


if __name__ == "__main__":
    main()
