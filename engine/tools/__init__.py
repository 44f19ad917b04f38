"""Tools for agents: a task's typed Python functions the policy calls in an episode.

- ``calls``: tool calls parsed from an assistant's text, and the OpenAI-format
  messages they become (``tool_calls``, role ``tool``);
- ``render``: the prompt with the tools, through the model's chat template or
  the documented convention where it has none;
- ``worker`` / ``process``: the tool process (both ends), where tool code runs
  isolated as reward code does;
- ``episode``: the tool loop as an environment (``engine.types.Environment``).
"""
