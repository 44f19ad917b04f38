"""A real TRL GRPOTrainer run with ``tools=`` on the calculator's tiny policy (CPU, a few steps).

Test-only: needs ``trl`` (``pip install -e ".[trl]"``). Used by tests/test_tools_trl.py, and by hand:

    .venv/bin/python tests/trl_tools_grpo.py --out /tmp/trl-tools --steps 2 --rlab-db runs.db

TRL 1.16 parses tool calls with the tokenizer's response template, which it sets
itself only for the chat templates it knows (Qwen, Llama 3, ...); none of those is
a model here offline. The calculator's tiny policy renders tools through its own
template (``engine.policy.tiny.TOOL_CHAT_TEMPLATE``), so this script gives its
tokenizer the response template that reads that format back: TRL's own tool loop
then runs the calls, and ``RlabCallback`` stores the multi-turn completions.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rlab.scenarios.calculator.tools import add, multiply  # the scenario's own tools, as the engine offers them

#: transformers' response template (>= 5.13) for the tiny tool template's turns: each turn
#: starts after the newline that ends the prompt (a question's or a tool result's line).
TINY_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "\n",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*", "repeats": True,
                       "content": "json", "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"</s>\s*", "content": "text"},
    },
}


def correct_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the last message's last integer is the answer."""
    out = []
    for completion, right in zip(completions, answer):
        numbers = re.findall(r"-?\d+", str(completion[-1].get("content") or ""))
        out.append(float(bool(numbers) and numbers[-1] == right and completion[-1]["role"] == "assistant"))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="TRL output_dir")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--rlab-db", type=Path, help="also write into this rlab run file")
    parser.add_argument("--model", type=Path, help="model directory (default: the calculator's tiny policy)")
    args = parser.parse_args(argv)

    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from rlab.engine.train.warm_start import ensure_tiny_model
    from rlab.scenarios import get_scenario

    scenario = get_scenario("calculator")
    model_dir = args.model or ensure_tiny_model(scenario, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.response_template = TINY_RESPONSE_TEMPLATE
    examples = scenario.train_examples(0)[:32]
    dataset = Dataset.from_list([{"prompt": [{"role": "system", "content": scenario.system_prompt},
                                             {"role": "user", "content": e["prompt"]}],
                                  "answer": e["answer"]} for e in examples])
    config = GRPOConfig(
        output_dir=str(args.out), max_steps=args.steps, per_device_train_batch_size=8,
        num_generations=8, max_completion_length=200, learning_rate=1e-5, logging_steps=1,
        log_completions=True, num_completions_to_print=0, save_strategy="no", report_to="none",
        use_cpu=True, seed=0, temperature=1.0, beta=0.0, dataloader_num_workers=0,
        max_tool_calling_iterations=3)
    trainer = GRPOTrainer(model=str(model_dir), processing_class=tokenizer, reward_funcs=[correct_reward],
                          args=config, train_dataset=dataset, tools=[add, multiply])
    if args.rlab_db is not None:
        from rlab.engine.integrations.trl import RlabCallback

        trainer.add_callback(RlabCallback(args.rlab_db, trainer=trainer))
    trainer.train()


if __name__ == "__main__":
    main()
