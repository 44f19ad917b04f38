"""Writes train.jsonl (40 rows, 12 cities) and eval.jsonl (16 rows, 4 other cities): temperature questions, seeded.

The answer comes from rollout.py's TEMPERATURES, the table only its tool can read.
Run:  python make.py
"""

import ast
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATES = ["What is the temperature in {city} today?", "How warm is it in {city} today?",
             "Temperature in {city} today?", "How many degrees is it in {city}?"]


def temperatures():
    """rollout.py's TEMPERATURES, read without importing the Agents SDK."""
    tree = ast.parse((HERE / "rollout.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "TEMPERATURES")
    return ast.literal_eval(node.value)


def main():
    rng = random.Random(56)
    table = temperatures()
    cities = sorted(table)
    rng.shuffle(cities)
    held_out = cities[:4]  # eval asks about 4 cities train never mentions: only the tool knows them

    def rows(city_list, start):
        questions = [(t, c) for t in TEMPLATES for c in city_list]
        rng.shuffle(questions)
        return [{"id": f"temp-{start + i}", "prompt": t.format(city=c), "city": c, "answer": str(table[c])}
                for i, (t, c) in enumerate(questions)]

    train = rows(cities[4:], 0)[:40]
    evaluation = rows(held_out, 40)
    for name, part in (("train.jsonl", train), ("eval.jsonl", evaluation)):
        (HERE / name).write_text("".join(json.dumps(r) + "\n" for r in part))


if __name__ == "__main__":
    main()
