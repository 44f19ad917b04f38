"""Trainer update on episodes of unequal length: one padded pass vs padding-aware micro-batches.

    python tests/bench/padding.py [--episodes 24] [--repeats 3]

The batch is what an 8 x 8 FrozenLake step trains (issue 33): groups of 8
episodes sharing a 120-token first observation, each 300 to 1,800 tokens
long, every 74th token pair trained (a move) and the rest observation. The
tiny policy's architecture with a 2,048-token context, one CPU thread. The
same weights and batch run with ``MAX_PADDING_SHARE = 1`` (never cut for
padding: one pass, the trainer before issue 33) and with the shipped share,
alternating so machine noise hits both alike. Prints JSON: median seconds
per update for each, their ratio, the micro-batch sizes, and the loss and
grad norm of each (they must agree: the cut is gradient accumulation).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

# tests/bench/store.py and tui.py would shadow the packages of the same name.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

from rlab.engine.run.config import RunConfig  # noqa: E402
from rlab.engine.policy.tiny import build_config, build_tokenizer  # noqa: E402
from rlab.engine.train import microbatch, trainer  # noqa: E402
from rlab.engine.types import TrainSample  # noqa: E402


def episodes(n: int, seed: int = 0) -> list[TrainSample]:
    """``n`` episode samples in groups of 8, 300-1,800 completion tokens each."""
    rng = random.Random(seed)
    samples = []
    for start in range(0, n, 8):
        prompt = [rng.randrange(4, 100) for _ in range(120)]
        for _ in range(min(8, n - start)):
            width = rng.randrange(300, 1800)
            mask = [1.0 if j % 74 < 2 else 0.0 for j in range(width)]
            samples.append(TrainSample(prompt, [rng.randrange(4, 100) for _ in range(width)], [-1.0] * width,
                                       advantage=rng.choice([-1.0, 1.0]), loss_mask=mask))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = LlamaForCausalLM(build_config(len(build_tokenizer()), 2048))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    samples = episodes(args.episodes)
    shipped = microbatch.MAX_PADDING_SHARE
    shares = {"one_pass": 1.0, "padding_aware": shipped}
    seconds: dict[str, list[float]] = {label: [] for label in shares}
    metrics: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for label, share in shares.items():
            model.load_state_dict(start)
            microbatch.MAX_PADDING_SHARE = share
            update = trainer.Trainer(model, 0, trainer.TrainConfig.from_run(RunConfig()))
            t0 = time.perf_counter()
            result = update.update(samples)
            seconds[label].append(time.perf_counter() - t0)
            metrics[label] = {"loss": result["loss"], "grad_norm": result["grad_norm"]}
    microbatch.MAX_PADDING_SHARE = shipped
    cuts = microbatch.micro_batches(microbatch.by_length(samples), 100, microbatch.LOGITS_BUDGET_BYTES)
    median = {label: statistics.median(s) for label, s in seconds.items()}
    print(json.dumps({"bench": "padding", "episodes": len(samples), "threads": 1,
                      "max_padding_share": shipped, "median_update_s": median,
                      "speedup": median["one_pass"] / median["padding_aware"],
                      "micro_batch_sizes": [len(c) for c in cuts], "metrics": metrics}, indent=1))


if __name__ == "__main__":
    main()
