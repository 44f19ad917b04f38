"""Playing rollouts: G trajectories per example, single-turn or in an environment.

Single-turn: each example's prompt is rendered once and sampled G times in
one batched ``Sampler.sample`` call for the whole step. Multi-step: G
episodes per example from the identical initial state, one batched sample
call per turn (:mod:`rlab.engine.rollout.episodes`). Both give
:class:`~rlab.engine.types.Rollouts`; scoring and advantages come after.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from rlab.engine.run.config import RunConfig
from rlab.engine.rewards.success import SuccessRule
from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.rewards.scoring import Scorer, failed_rollouts, scorer_examples
from rlab.engine.rollout.episodes import run_groups
from rlab.engine.rollout.token_ends import token_ends
from rlab.engine.tools.episode import ToolEpisode
from rlab.engine.tools.process import ToolProcess
from rlab.engine.types import Example, Message, Rollouts, Sample, Sampler, Trajectory, Turn
from rlab.engine.types import MultiStepScenario, Scenario, ToolScenario
from rlab.store.errors import UsageError

if TYPE_CHECKING:
    from rlab.engine.agent.play import AgentRollout


def user_messages(example: Example, system_prompt: str | None) -> list[Message]:
    """The chat messages of a single-turn prompt: the system prompt (unless the
    prompt brings its own), then the prompt (a text, or a list of chat messages)."""
    prompt = example["prompt"]
    turns = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    has_system = bool(turns) and turns[0].get("role") == "system"
    head = [{"role": "system", "content": system_prompt}] if system_prompt and not has_system else []
    return head + turns


def prompt_text(example: Example) -> str:
    """The example's prompt as stored text (chat messages as ``role: content`` lines)."""
    prompt = example["prompt"]
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role')}: {m.get('content')}" for m in prompt)
    return str(prompt)


@dataclass(frozen=True)
class HeldOut:
    """One held-out evaluation: greedy pass@1 by the task's success rule, and the rewards beside it.

    pass_at_1: share of examples whose greedy trajectory solved the task
    (``engine.rewards.success``), nan when a score errored (no verdict). reward: mean
    total reward (nan when a score errored). components: each reward
    function's mean unweighted value, by name (errored scores left out).
    num_examples: how many examples were evaluated (pass@1's denominator, so
    a reader can tell a fall from sampling noise). outcomes: each example's
    id and verdict (True / False, None for no verdict), in order: what pairs
    two runs' evals example by example (``rlab compare --from-step``).
    tool_use_rate: a tool task's share of greedy episodes that called a tool
    (nan for other tasks). tool_call_ok_rate: the share of those episodes' calls
    that parsed and ran without an error (nan when none called).
    """

    pass_at_1: float
    reward: float
    components: dict[str, float]
    num_examples: int
    outcomes: list[tuple[Any, bool | None]] = field(default_factory=list)
    tool_use_rate: float = math.nan
    tool_call_ok_rate: float = math.nan

    def metrics(self) -> dict[str, float]:
        """As step metrics: ``eval/pass_at_1``, ``eval/reward``, ``eval/rewards/{name}/mean``
        (TRL's per-function names under ``eval/``), ``eval/num_examples`` and, for a tool
        task, ``eval/tools/use_rate`` (share of greedy episodes that called a tool); a nan
        is left out (no verdict)."""
        values = {"eval/pass_at_1": self.pass_at_1, "eval/reward": self.reward,
                  **{f"eval/rewards/{name}/mean": v for name, v in self.components.items()},
                  "eval/num_examples": float(self.num_examples), "eval/tools/use_rate": self.tool_use_rate}
        return {k: v for k, v in values.items() if not math.isnan(v)}


def held_out(scores: list[ScoreResult], success: SuccessRule, example_ids: list[Any] | None = None) -> HeldOut:
    """The held-out figures of greedy ``scores`` (one per example, of ``example_ids``)."""
    clean = [s for s in scores if s.error is None]
    errored = len(clean) < len(scores)
    names = dict.fromkeys(name for s in clean for name in s.components)
    return HeldOut(
        pass_at_1=success.rate(scores),
        reward=float("nan") if errored or not scores else float(np.mean([s.reward for s in scores])),
        components={name: float(np.mean([s.components[name] for s in clean if name in s.components]))
                    for name in names},
        num_examples=len(scores),
        outcomes=list(zip(example_ids, (success.passed(s) for s in scores))) if example_ids is not None else [])


def _single_turn(messages: list[Message], prompt_ids: list[int], sample: Sample,
                 tokenizer: PreTrainedTokenizerBase | None) -> Trajectory:
    turn = Turn(prompt_ids=prompt_ids, completion_ids=sample.token_ids, logprobs=sample.logprobs,
                text=sample.text, reward=0.0, state_key=None, observation=[], invalid=False,
                truncated=sample.truncated, token_ends=token_ends(tokenizer, sample))
    return Trajectory(messages=messages + [{"role": "assistant", "content": sample.text}],
                      initial_state_key=None, turns=[turn], done=True, truncated=sample.truncated)


class Rollout:
    """Plays a scenario's rollouts with a sampler, with the run's sampling settings.

    Args:
        sampler: the policy (HF generate) or a vLLM server.
        scenario: the task; a multi-step one (``multi_step``, a
            :class:`~rlab.engine.types.MultiStepScenario`)
            is played in its environment, a tool task (a
            :class:`~rlab.engine.types.ToolScenario`) in the tool loop
            (``engine.tools``), with its tools unless ``config.tools`` is off.
        config: the run's settings (group size, max_new_tokens per turn,
            temperature, the tools' limits).
        tokenizer: the policy's tokenizer, to record where each sampled
            token ends in a single-turn completion (None: not recorded).

    Attributes:
        tools: the tool process of a tool task that offers its tools, else None;
            started on first use, stopped by :meth:`close`.
    """

    def __init__(self, sampler: Sampler, scenario: Scenario, config: RunConfig,
                 tokenizer: PreTrainedTokenizerBase | None = None):
        self.sampler = sampler
        self.scenario = scenario
        self.config = config
        self.tokenizer = tokenizer
        self.tools = (ToolProcess(scenario.tools_file, timeout_s=config.tool_timeout_s,
                                  result_chars=config.tool_result_chars)
                      if isinstance(scenario, ToolScenario) and config.tools and not config.agent else None)
        self.agent: AgentRollout | None = None
        if config.agent:
            from rlab.engine.agent.play import AgentRollout  # fastapi and uvicorn load only for an agent run

            if not scenario.multi_step and "agent" not in scenario.run_defaults:
                raise UsageError(f"--agent: the rewards of {scenario.name!r} read one completion's text, but an agent's "
                                 "rollout is scored on the conversation it returns; give a task whose task.toml names "
                                 "the agent (agent = \"rollout.py\") and whose rewards read messages (examples/agents/), "
                                 "or a multi-step or tool task")
            self.agent = AgentRollout(sampler, tokenizer, Path(config.agent), timeout_s=config.agent_timeout_s,
                                      max_new_tokens=config.max_new_tokens,
                                      max_turns=scenario.max_turns
                                      if isinstance(scenario, (MultiStepScenario, ToolScenario)) else 1)

    @property
    def metrics(self) -> dict[str, float]:
        """The last play's figures beside the groups (an agent run's endpoint and errors)."""
        return {} if self.agent is None else self.agent.metrics

    def close(self) -> None:
        """Stop the tool process and the agent's, if they run (a later rollout starts them again)."""
        if self.tools is not None:
            self.tools.close()
        if self.agent is not None:
            self.agent.close()

    def play(self, examples: list[Example], *, group_size: int | None = None,
             temperature: float | None = None) -> Rollouts:
        """G trajectories per example (defaults: the run's group size and temperature)."""
        g = self.config.group_size if group_size is None else group_size
        temp = self.config.temperature if temperature is None else temperature
        if self.agent is not None:
            return Rollouts(examples, self.agent.play(examples, g, temp), multi_step=True)
        if isinstance(self.scenario, ToolScenario):
            tools = self.tools
            groups = run_groups(self.sampler, lambda _: ToolEpisode(tools), examples, g,
                                max_turns=self.scenario.max_turns, max_new_tokens=self.config.max_new_tokens,
                                temperature=temp, system_prompt=self.scenario.system_prompt,
                                tools=None if tools is None else tools.schemas)
            return Rollouts(examples, groups, multi_step=True)
        if self.scenario.multi_step and isinstance(self.scenario, MultiStepScenario):
            groups = run_groups(self.sampler, self.scenario.make_env, examples, g,
                                max_turns=self.scenario.max_turns, max_new_tokens=self.config.max_new_tokens,
                                temperature=temp, system_prompt=self.scenario.system_prompt)
            return Rollouts(examples, groups, multi_step=True)
        messages = [user_messages(ex, self.scenario.system_prompt) for ex in examples]
        prompt_ids = [self.sampler.render(m) for m in messages]
        samples = self.sampler.sample([p for p in prompt_ids for _ in range(g)],
                                      max_new_tokens=self.config.max_new_tokens, temperature=temp)
        groups = [[_single_turn(messages[i], prompt_ids[i], s, self.tokenizer) for s in samples[i * g:(i + 1) * g]]
                  for i in range(len(examples))]
        return Rollouts(examples, groups, multi_step=False)

    def evaluate(self, examples: list[Example], rubric: Scorer, success: SuccessRule) -> HeldOut:
        """Held-out greedy evaluation: one greedy trajectory per example, scored
        by ``rubric``, solved by ``success`` (for multi-step: solved episodes)."""
        rollouts = self.play(examples, group_size=1, temperature=0.0)
        scores = failed_rollouts(rubric.score_group(scorer_examples(rollouts), rollouts.scorer_inputs()),
                                 rollouts.trajectories())
        result = held_out(scores, success, [example["id"] for example in examples])
        tooled = [t for t in rollouts.trajectories() if t.tools]
        calls = [c for t in tooled for c in t.tool_calls]
        if tooled:
            result = dataclasses.replace(result, tool_use_rate=float(np.mean([bool(t.tool_calls) for t in tooled])),
                                         tool_call_ok_rate=float(np.mean([c.error is None for c in calls]))
                                         if calls else math.nan)
        return result
