"""Writes train.jsonl (40 rows) and eval.jsonl (16 rows): a secret integer in 1..n, n in 4..7, seeded.

Run:  python make.py
"""

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    rng = random.Random(56)
    rows = []
    for i in range(56):
        n = rng.randint(4, 7)
        rows.append({"id": f"guess-{i}", "example_id": i, "n": n, "answer": str(rng.randint(1, n)),
                     "prompt": f"Guess my number from 1 to {n}. Reply with the number only."})
    for name, part in (("train.jsonl", rows[:40]), ("eval.jsonl", rows[40:])):
        (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in part))


if __name__ == "__main__":
    main()
