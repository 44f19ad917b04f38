"""The engine's vocabulary: one trajectory type for every task kind, group in, group out.

A *trajectory* is one conversation the policy had with a prompt (single-turn)
or an environment (multi-step); each assistant message in it is a *turn*. A
single-turn trajectory is simply the one-turn case, so rollout, scoring,
advantages and training all handle both kinds with the same types (the model
is OpenPipe ART's trajectories: one type, a group of them per prompt).
A *group* is the G trajectories played from one example; one step's
:class:`Rollouts` is P groups. The stored form of these (``GroupRecord``,
``TrajectoryRecord``, ``TurnRecord``) lives in ``rlab.store.records``, since
the store may not import the engine; a step's records and trainer samples
together are ``engine.train.batch.StepBatch``. Scenarios import this module,
so it imports neither the store nor torch. See docs/architecture.md.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # torch-backed; only the type is needed here
    from rlab.engine.policy.kv import PrefixCache

#: An OpenAI-style chat message: {"role": ..., "content": ...}.
Message = dict[str, Any]

#: One dataset row: ``id``, ``prompt`` (text), usually ``answer``, plus any
#: other columns a scenario's reward functions read. Rows are user data, so
#: their columns are open; the engine itself reads only ``id`` and ``prompt``.
Example = dict[str, Any]


@dataclass
class Sample:
    """One sampled completion.

    token_ids: the completion's token ids (EOS included when it was sampled).
    text: the decoded completion, special tokens removed.
    logprobs: log-probability (nats) of each sampled token under the sampling
        distribution (temperature applied), one per entry of ``token_ids``.
    truncated: True when generation stopped at ``max_new_tokens`` before EOS.
    """

    token_ids: list[int]
    text: str
    logprobs: list[float]
    truncated: bool


@dataclass
class TrainSample:
    """One policy-gradient unit: a context, then tokens of which some are trained.

    ``prompt_ids`` is the context before the first trained token (the
    rendered prompt of a single-turn trajectory, or an episode's
    conversation before its first assistant turn). ``completion_ids`` is
    every token after it: a completion, or an episode's assistant turns with
    the observations between them (one forward pass for the whole episode).
    ``old_logprobs`` (nats, one per completion token) come from the sampling
    policy and form the denominator of the importance ratio (0 where not
    trained). ``advantage`` applies to every trained token unless
    ``token_advantages`` (one float per completion token) gives each its own
    (GiGPO: each turn's A^E + omega A^S on that turn's tokens).
    ``loss_mask`` (one 0/1 per completion token) marks the trained,
    assistant-sampled tokens; None trains every completion token.
    ``policy_logprobs`` (nats, one per completion token) is what the trainer
    fills in: the trained policy's log-probs of the tokens at the step's
    first forward pass, before any weight moved (the pi_old of truncated
    importance sampling, ``engine.train.trainer``); None until it has (a
    sample without signal is not forwarded).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float = 0.0
    token_advantages: list[float] | None = None
    loss_mask: list[float] | None = None
    policy_logprobs: list[float] | None = None

    def advantages(self) -> list[float]:
        """Per completion token, its advantage."""
        if self.token_advantages is not None:
            return self.token_advantages
        return [self.advantage] * len(self.completion_ids)

    def mask(self) -> list[float]:
        """Per completion token, 1.0 when it is trained, else 0.0."""
        return self.loss_mask if self.loss_mask is not None else [1.0] * len(self.completion_ids)

    @property
    def has_signal(self) -> bool:
        """Some trained token has a non-zero advantage (else the sample adds no policy gradient)."""
        return any(a != 0.0 and m for a, m in zip(self.advantages(), self.mask()))


#: What went wrong with a tool call that failed in the tool process (``engine.tools.worker``):
#: the policy named no tool or gave bad arguments (its turn is then ``invalid``); the tool
#: raised, ran past its limit, returned too much, a credential or a value that is not JSON;
#: the tools file did not load; the process died, answered out of turn, or failed itself.
ToolErrorKind = Literal["unknown_tool", "bad_arguments", "raised", "timeout", "too_long", "credential",
                        "unserialisable", "not_loaded", "died", "out_of_step", "internal"]


@dataclass
class ToolCall:
    """One tool call an assistant turn made, with what came back.

    id: the call's id within its trajectory (``call_{turn}_{k}``), which its
        ``tool`` message answers (``tool_call_id``, OpenAI's format).
    name: the tool the policy named (it may not exist: then ``error`` says so).
    arguments: the arguments as the policy wrote them (a JSON object; ``{}``
        when they did not parse).
    result: the tool's answer as the policy saw it (text, scrubbed of secrets,
        capped; ``""`` when the call failed).
    error: None for a call that ran and returned; else what went wrong, as the
        policy saw it (a malformed call, an unknown tool, bad arguments, an
        exception, a time-out, an oversized or secret-bearing result).
    seconds: wall seconds the call took in the tool process (0.0 when it never ran).
    kind: which failure ``error`` is (:data:`ToolErrorKind`), when the tool
        process reported it; None for a call that returned, or one that
        never reached the process (a malformed call, a run without tools).
    """

    id: str
    name: str
    arguments: dict[str, Any]
    result: str = ""
    error: str | None = None
    seconds: float = 0.0
    kind: ToolErrorKind | None = None


@dataclass
class Turn:
    """One assistant turn of a trajectory.

    prompt_ids: the rendered conversation before this turn (tokens).
    completion_ids / logprobs: the sampled tokens and their log-probabilities
        (nats) under the sampling policy, one per token.
    text: the decoded assistant message.
    reward: the environment's reward minus the invalid-action penalty
        (0.0 for a single-turn trajectory, which has no environment).
    state_key: the state in which this turn acted (GiGPO's anchor state;
        None for a single-turn trajectory).
    observation: the messages the environment answered with (none for
        single-turn).
    invalid: the environment rejected the action.
    truncated: generation stopped at ``max_new_tokens`` before EOS.
    token_ends: per sampled token, the character offset in ``text`` where
        its text ends (for per-token views), or None when the tokens' texts
        do not add up to ``text`` (e.g. a character split across byte tokens).
    tool_calls: the calls this turn made (a tool task; ``[]`` otherwise), in order.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    reward: float
    state_key: Hashable
    observation: list[Message]
    invalid: bool
    truncated: bool
    token_ends: list[int] | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class Trajectory:
    """One conversation of the policy: a single-turn completion or a multi-step episode.

    messages: the whole conversation, OpenAI-style (system prompt if any,
        the prompt or observations as ``user``, turns as ``assistant``).
    initial_state_key: the state key after the environment's reset (None
        for single-turn).
    done: the episode ended (always True for single-turn).
    truncated: a multi-step episode stopped at ``max_turns`` before the end;
        a single-turn completion stopped at ``max_new_tokens`` before EOS.
    tools: tools were offered (a tool task), so :attr:`tool_calls` is a
        verdict even when empty.
    error: a user agent's rollout that failed outside the policy, as
        ``kind: message`` (``engine.agent.trajectory``); it is scored 0.
    notes: what the record says beside the turns (an agent that rewrote a reply).
    """

    messages: list[Message]
    initial_state_key: Hashable
    turns: list[Turn] = field(default_factory=list)
    done: bool = False
    truncated: bool = False
    tools: bool = False
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Every tool call of the episode, turn by turn."""
        return [call for turn in self.turns for call in turn.tool_calls]

    @property
    def total_reward(self) -> float:
        """Sum of the turns' environment rewards (the undiscounted episode return)."""
        return float(sum(t.reward for t in self.turns))

    @property
    def n_invalid(self) -> int:
        """Number of turns whose action the environment rejected."""
        return sum(t.invalid for t in self.turns)

    @property
    def step_rewards(self) -> list[float]:
        """Per-turn environment rewards, in order."""
        return [t.reward for t in self.turns]

    @property
    def state_keys(self) -> list[Hashable]:
        """Per-turn state keys (the state each turn acted in), in order."""
        return [t.state_key for t in self.turns]

    @property
    def completion_tokens(self) -> int:
        """Sampled tokens over all turns."""
        return sum(len(t.completion_ids) for t in self.turns)


@dataclass
class Rollouts:
    """One step's rollouts before scoring: P groups of G trajectories.

    examples: the P examples, in order. groups: P lists of G trajectories
    (group i played from examples[i]). multi_step: the trajectories are
    environment episodes (rubric functions then receive the whole
    conversation instead of the completion text).
    """

    examples: list[Example]
    groups: list[list[Trajectory]]
    multi_step: bool

    @property
    def group_size(self) -> int:
        """G, trajectories per group."""
        return len(self.groups[0]) if self.groups else 0

    def trajectories(self) -> list[Trajectory]:
        """All P * G trajectories, group by group."""
        return [t for group in self.groups for t in group]

    def flat_examples(self) -> list[Example]:
        """Each trajectory's example, aligned with :meth:`trajectories`."""
        return [ex for ex, group in zip(self.examples, self.groups) for _ in group]

    def scorer_inputs(self) -> list[str | list[Message]]:
        """What the rubric scores, aligned with :meth:`trajectories`: the
        completion text (single-turn) or the whole conversation (multi-step)."""
        if self.multi_step:
            return [t.messages for t in self.trajectories()]
        return [t.turns[-1].text for t in self.trajectories()]


class Sampler(Protocol):
    """Where rollouts come from: ``Policy`` (HF generate) or ``VLLMBackend``."""

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Token ids of ``messages`` under the chat template, with the
        assistant turn opened (the generation prompt). ``tools``: the JSON
        schemas (OpenAI function format) of the tools offered, rendered by
        the template where it supports tools, else by the convention of
        ``engine.tools.render``."""
        ...

    def sample(self, prompt_ids: list[list[int]], *, max_new_tokens: int, temperature: float,
               cache: PrefixCache | None = None) -> list[Sample]:
        """One completion per prompt, in order (temperature 0: greedy). ``cache``
        carries the previous turn's KV between the turns of a batch of episodes;
        a sampler that caches prefixes itself (a vLLM server) ignores it."""
        ...


class Environment(Protocol):
    """One episode of a multi-step scenario.

    ``invalid`` is True after a ``step`` whose action could not be applied
    (unparsable, or illegal in the state); the environment then returns an
    observation telling the policy so and leaves its state unchanged. It
    must never raise for a bad action: the policy's text is untrusted input.
    """

    invalid: bool

    def reset(self, example: Example) -> tuple[list[Message], Hashable | None]:
        """Start the episode; return (observation messages, initial state key or None)."""
        ...

    def step(self, action: str) -> tuple[list[Message], float, bool, Hashable | None]:
        """Apply one assistant turn; return (observation messages, reward, done, state key or None)."""
        ...


@runtime_checkable
class ToolEnvironment(Environment, Protocol):
    """An environment whose actions may call tools (``engine.tools.episode``).

    After each ``step``: ``last_message`` is the assistant turn as OpenAI
    writes it (its text outside the calls as ``content``, its calls as
    ``tool_calls``), which the episode keeps instead of the raw text, and
    ``last_calls`` the calls it made with their results or errors.
    """

    last_message: Message
    last_calls: list[ToolCall]


@runtime_checkable
class Scenario(Protocol):
    """What the engine needs from a task (single-turn; see :class:`MultiStepScenario`).

    name: the scenario's name in run files. multi_step: its trajectories are
    environment episodes (then it is also a :class:`MultiStepScenario`).
    system_prompt: the first message of every prompt, or None. reward_file:
    the rubric file each run copies and may edit. judge_rubric: the RULER
    judge's instructions for this task, or None for the judge's default.
    warm_start_target / warm_start_steps: the tiny policy's warm start stops
    at this greedy probe pass@1 (None: never early) or after this many
    supervised steps. run_defaults: RunConfig values this task needs instead
    of the arithmetic recipe's (e.g. a longer ``max_new_tokens``); a value
    the user set explicitly wins. success / success_threshold: what counts as
    solved, the reward function of ``reward_file`` whose unweighted value
    must reach the threshold (None: the total reward; ``engine.rewards.success``).
    tiny_context_tokens: the tiny policy's context in tokens, for a scenario
    whose longest episode needs more room (None: ``engine.policy.tiny``'s
    default). ``scenarios.base.ScenarioBase`` declares them all with defaults.
    """

    name: str
    multi_step: bool
    system_prompt: str | None
    reward_file: Path
    judge_rubric: str | None
    success: str | None
    success_threshold: float
    warm_start_target: float | None
    warm_start_steps: int
    tiny_context_tokens: int | None
    run_defaults: Mapping[str, Any]

    def train_examples(self, seed: int) -> list[Example]:
        """The train split, shuffled or drawn with ``seed``."""
        ...

    def eval_examples(self) -> list[Example]:
        """The fixed held-out split (the same for every seed)."""
        ...

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(context, completion) text pairs the tiny policy is warm-started on."""
        ...


@runtime_checkable
class MultiStepScenario(Scenario, Protocol):
    """A scenario whose trajectories are episodes in an environment.

    max_turns: assistant turns at most per episode. make_env: a fresh
    environment for one example (it seeds itself from the example, so every
    episode of a group starts from the same state).
    """

    max_turns: int

    def make_env(self, example: Example) -> Environment:
        """A fresh environment for ``example``."""
        ...


@runtime_checkable
class ToolScenario(Scenario, Protocol):
    """A scenario whose episodes are a tool-using agent's: the policy calls tools, results come back.

    tools_file: the Python file whose typed, documented functions are the
    tools (``TOOLS = [...]`` names them, else every public function it
    defines); it runs only in the tool process (``engine.tools``), never in
    the engine. max_turns: assistant turns at most per episode; an episode
    ends on an answer without a call, or there. The first user message is
    the example's prompt (a text, or chat messages).
    """

    max_turns: int
    tools_file: Path

    def sft_transcripts(self, seed: int) -> list[list[Message]]:
        """Conversations the tiny policy is warm-started on (after the system prompt):
        user messages, assistant turns (calls as ``tool_calls``) and ``tool`` results;
        each assistant turn is rendered by the policy's chat template and trained, but
        one marked ``"train": False`` (context only)."""
        ...

    def demonstrations(self, seed: int) -> list[list[Message]]:
        """Conversations, of the same form, that a real model's warm start trains its LoRA
        adapter on before RL (``engine.train.adapter_warm_start``): the task done right.
        The tiny policy's transcripts may hold wrong answers on purpose (so its RL has room
        to show); a real model learns from these instead. Empty: no warm start."""
        ...
