"""A real TRL GRPOTrainer run on the embedded tiny policy (CPU, a few steps).

Test-only: needs ``trl`` (``pip install -e ".[trl]"``). Used by
tests/test_formats_trl_live.py, and by hand to produce a real TRL output_dir:

    .venv/bin/python tests/trl_tiny_grpo.py --out /tmp/trl-out --steps 3
    .venv/bin/python tests/trl_tiny_grpo.py --out /tmp/trl-out --steps 3 --rlab-db runs.db

``--rlab-db`` adds rlab's TRL callback (rlab.engine.integrations.trl), which
writes every logged step straight into that run file.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def correct_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the completion's text is the answer."""
    return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]


def short_reward(completions, **kwargs) -> list[float]:
    """1.0 for at most 3 characters (an answer and nothing else)."""
    return [float(len(c[0]["content"].strip()) <= 3) for c in completions]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="TRL output_dir")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rlab-db", type=Path, help="also write into this rlab run file")
    parser.add_argument("--model", type=Path, help="model directory (default: the tiny policy)")
    args = parser.parse_args(argv)

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from rlab.engine.train.warm_start import ensure_tiny_model
    from rlab.scenarios import get_scenario

    scenario = get_scenario("arithmetic")
    model_dir = args.model or ensure_tiny_model(scenario, seed=0)
    examples = scenario.train_examples(0)[:64]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": e["prompt"]}],
                                  "answer": e["answer"]} for e in examples])
    config = GRPOConfig(
        output_dir=str(args.out), max_steps=args.steps, per_device_train_batch_size=4,
        num_generations=4, max_completion_length=6, learning_rate=1e-5, logging_steps=1,
        log_completions=True, num_completions_to_print=0, save_strategy="no",
        report_to="none", use_cpu=True, seed=0, temperature=1.0, beta=0.0,
        dataloader_num_workers=0)
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[correct_reward, short_reward],
                          args=config, train_dataset=dataset)
    if args.rlab_db is not None:
        from rlab.engine.integrations.trl import RlabCallback

        trainer.add_callback(RlabCallback(args.rlab_db, trainer=trainer))
    trainer.train()
    trainer.save_state()


if __name__ == "__main__":
    main()
