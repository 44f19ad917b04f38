"""The parent's side of the agent process: a user's ``rollout.py``, run outside the engine.

An :class:`AgentProcess` keeps one child (``python -P -m
rlab.engine.agent.worker``) for the run, with the isolation tools and reward
code have (``engine.rewards.child.UserCodeProcess``): address-space cap,
scratch working directory, own process group, output scrubbed of credentials
and bounded on its way to the log. A step's rollouts go in one request and
run there concurrently (asyncio); each has the rollout time limit there, and
the whole request this side's wall clock, for an agent that blocks the event
loop. Whatever goes wrong is a rollout's error (:class:`RolloutResult`),
never the run's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlab.engine.rewards.child import DEFAULT_MEMORY_MB, OutOfStep, UserCodeProcess
from rlab.engine.types import Example, Message
from rlab.store.errors import UsageError

#: The agent worker's module.
AGENT_WORKER = "rlab.engine.agent.worker"
#: Seconds a rollout may take by default (``--agent-timeout``).
DEFAULT_ROLLOUT_TIMEOUT_S = 120.0
#: Seconds the file gets to load (the openai package's import included).
LOAD_TIMEOUT_S = 60.0
#: Seconds the whole request may run past the rollout limit before the process counts as
#: blocked (a reload after a replaced process included).
MARGIN_S = 15.0
#: Address-space cap, MiB: an agent framework (ART's client side) imports a lot.
DEFAULT_AGENT_MEMORY_MB = 4 * DEFAULT_MEMORY_MB


class AgentFileError(UsageError):
    """A rollout file that cannot run: it does not load or defines no ``async def rollout``.

    Raised before a run starts; the message names the file and the fix."""


@dataclass
class RolloutResult:
    """What one rollout gave back.

    messages: the conversation it returned (None when it failed).
    reward: the reward it computed itself (ART's ``Trajectory.reward``), or None.
    metrics: its own figures, by name.
    error: None, or ``(kind, message)``: kind one of ``raised``, ``timeout``,
        ``bad_return`` (``engine.agent.worker``) or ``hung`` (it blocked the
        whole process past the limit).
    """

    messages: list[Message] | None
    reward: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    error: tuple[str, str] | None = None


class AgentProcess:
    """A user's rollout file behind one isolated child process.

    Args:
        file: the rollout file (read once: edits during a run change nothing).
        timeout_s: seconds per rollout.
    """

    def __init__(self, file: Path, *, timeout_s: float = DEFAULT_ROLLOUT_TIMEOUT_S,
                 memory_mb: int = DEFAULT_AGENT_MEMORY_MB) -> None:
        self.file = Path(file)
        try:
            self.source = self.file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise AgentFileError(f"cannot read the rollout file {self.file}: {err}; pass --agent with a "
                                 "Python file that defines `async def rollout(client, model, example)`") from None
        self.timeout_s = timeout_s
        self.child = UserCodeProcess(memory_mb, module=AGENT_WORKER, label="agent code")

    def check(self) -> None:
        """Load the file once in the child.

        Raises:
            AgentFileError: it does not load, or defines no fitting ``rollout``.
        """
        reply = self._ask({"kind": "load"}, LOAD_TIMEOUT_S)
        if reply is None:
            raise AgentFileError(f"{self.file}: loading it did not finish within {LOAD_TIMEOUT_S:g} s or ended "
                                 f"the process; its last output: {self.child.last_output[-300:]!r}")
        if "failure" in reply:
            raise AgentFileError(f"{self.file}: {reply['failure']}")

    def run(self, rollouts: list[tuple[str, str, Example]], *, model: str, api_key: str) -> dict[str, RolloutResult]:
        """Run ``(key, base_url, example)`` rollouts concurrently; their results by key."""
        request = {"kind": "rollouts", "model": model, "api_key": api_key, "timeout_s": self.timeout_s,
                   "rollouts": [{"key": k, "base_url": url, "example": ex} for k, url, ex in rollouts]}
        reply = self._ask(request, self.timeout_s + MARGIN_S)
        if reply is None or "results" not in reply:
            why = (reply or {}).get("failure") or (
                f"the agent process blocked past {self.timeout_s:g} s (a rollout that never awaits) or died "
                f"(exit status {self.child.exit_status}); its last output: {self.child.last_output[-200:]!r}")
            return {k: RolloutResult(None, error=("hung", why)) for k, _, _ in rollouts}
        return {r["key"]: RolloutResult(r["messages"], r["reward"], r["metrics"],
                                        None if r["error"] is None else (r["error"]["kind"], r["error"]["message"]))
                for r in reply["results"]}

    def _ask(self, request: dict[str, Any], wall_s: float) -> dict[str, Any] | None:
        """The answer to ``request`` (with the file's text), or None: no answer in time, the
        process died, or it answered out of step (agent code wrote to its reply pipe)."""
        try:
            return self.child.ask_with_id({**request, "source": self.source, "filename": str(self.file)}, wall_s)
        except OutOfStep:
            return None

    def close(self) -> None:
        """Stop the process (a later run starts a new one)."""
        self.child.close()
