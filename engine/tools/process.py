"""The parent's side of the tool process: a task's tools, run outside the engine.

A :class:`ToolProcess` keeps one child (``python -P -m
rlab.engine.tools.worker``) for the run, started on first use and replaced
after a hang or a crash, with the isolation reward code has
(``engine.rewards.child``): an address-space cap, an empty scratch working
directory, its own process group, what it prints scrubbed and bounded on the
way to the log. Each call has a time limit (the worker's watchdog, and this
side's wall clock for a hang that holds the GIL), and its result is capped
and checked for credentials. Whatever goes wrong is a
:class:`~rlab.engine.types.ToolCall` with ``error`` set: the policy reads
it, the step counts it, the run goes on.

Each request carries a fresh id that its reply echoes. Tool code can write
to the worker's reply pipe (an open file descriptor like any other); a line
that is not the awaited reply replaces the process, so calls and answers
never drift out of step: that call is told so, the next one gets a new
process.

This is isolation, not a security boundary: tools run as the user, with the
user's files, network and environment. Run tools you would run yourself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlab.engine.rewards.child import DEFAULT_MEMORY_MB, OutOfStep, UserCodeProcess
from rlab.engine.types import ToolCall
from rlab.store.errors import UsageError
from rlab.store.secrets import scrub_text, secret_env_values

#: The tool worker's module.
TOOL_WORKER = "rlab.engine.tools.worker"
#: Seconds a tool call may take (the reward functions' limit).
DEFAULT_TOOL_TIMEOUT_S = 10.0
#: Characters a tool's result may have; a longer one is an error, not a cut result.
DEFAULT_RESULT_CHARS = 4000
#: Seconds the tools file gets to load and describe its tools (transformers' import included).
LOAD_TIMEOUT_S = 60.0
#: Address-space cap of the tool process, MiB: twice the reward process's, since loading a
#: verifiers environment there reserves 1.7 GB of address space before its tools run.
DEFAULT_TOOL_MEMORY_MB = 2 * DEFAULT_MEMORY_MB


class ToolsError(UsageError):
    """A task's tools that cannot be offered: the file does not load, or a tool has no schema.

    Raised before a run starts; the message names the file, the tool and the fix."""


class ToolProcess:
    """A task's tools behind one isolated child process.

    Args:
        tools_file: the tools file (its text is read once: edits during a run
            do not change its tools).
        timeout_s: seconds per call.
        result_chars: the most characters a result may have.
        memory_mb: the process's address-space cap, MiB.
    """

    def __init__(self, tools_file: Path, *, timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
                 result_chars: int = DEFAULT_RESULT_CHARS, memory_mb: int = DEFAULT_TOOL_MEMORY_MB) -> None:
        self.file = Path(tools_file)
        self.source = self.file.read_text(encoding="utf-8")
        self.timeout_s, self.result_chars = timeout_s, result_chars
        self.child = UserCodeProcess(memory_mb, module=TOOL_WORKER, label="tool code")
        self._schemas: list[dict[str, Any]] | None = None

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """The tools' JSON schemas, OpenAI's function format (loaded once).

        Raises:
            ToolsError: the file does not load, defines no tool, or a tool
                lacks type hints or argument descriptions.
        """
        if self._schemas is None:
            try:
                reply = self._ask({"kind": "load", "source": self.source, "filename": str(self.file)},
                                  LOAD_TIMEOUT_S)
            except OutOfStep:
                raise ToolsError(f"{self.file}: loading the tools wrote a line to the tool process's reply pipe; "
                                 "write output with print (it goes to the log)") from None
            if reply is None:
                died = self.child.exit_status
                why = (f"did not finish within {LOAD_TIMEOUT_S:g} s" if died is None else
                       f"ended the tool process (exit status {died}; its memory cap is {self.child.memory_mb} MiB)")
                raise ToolsError(f"{self.file}: loading the tools {why}; its last output: "
                                 f"{self.child.last_output[-300:]!r}")
            if "failure" in reply:
                raise ToolsError(f"{self.file}: {reply['failure']}")
            self._schemas = list(reply["tools"])
        return self._schemas

    @property
    def names(self) -> list[str]:
        """The tools' names, in the file's order."""
        return [s["function"]["name"] for s in self.schemas]

    def call(self, call_id: str, name: str, arguments: dict[str, Any]) -> ToolCall:
        """Run one call; every failure is the returned call's ``error``, never an exception."""
        request = {"kind": "call", "source": self.source, "filename": str(self.file), "name": name,
                   "arguments": arguments, "timeout_s": self.timeout_s, "max_chars": self.result_chars}
        try:
            reply = self._ask(request, self.timeout_s + 5.0)
        except OutOfStep:
            return ToolCall(call_id, name, arguments, kind="out_of_step",
                            error=f"the tool process answered {name} with a line that is not its reply (tool code "
                                  "wrote to the worker's reply pipe), so it was replaced; call again")
        except ValueError:  # arguments that do not serialise cannot come from parsed JSON; kept for safety
            return ToolCall(call_id, name, arguments, error=f"the arguments of {name} are not JSON",
                            kind="bad_arguments")
        if reply is None:
            died = self.child.exit_status
            error = (f"{name} did not return within {self.timeout_s:g} s" if died is None
                     else f"the tool process died while running {name} (exit status {died})")
            return ToolCall(call_id, name, arguments, error=error, seconds=self.timeout_s if died is None else 0.0,
                            kind="timeout" if died is None else "died")
        if reply["hung"]:
            self.child.kill()  # the hung call's thread still runs in there
        known = secret_env_values()
        error = reply["error"]
        return ToolCall(call_id, name, arguments, result=_text(scrub_text(reply["result"], known)),
                        error=None if error is None else _text(scrub_text(error, known)),
                        seconds=float(reply["seconds"]), kind=reply["kind"])

    def _ask(self, request: dict[str, Any], wall_s: float) -> dict[str, Any] | None:
        """``UserCodeProcess.ask_with_id`` (OutOfStep: the process answered out of step)."""
        return self.child.ask_with_id(request, wall_s)

    def close(self) -> None:
        """Stop the process (a later call starts a new one)."""
        self.child.close()


def _text(value: str) -> str:
    """``value`` as text every store and hash can take: a lone surrogate a tool returned (JSON's
    ``"\\ud800"``, which no UTF-8 file holds) is written as its escape instead."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")
