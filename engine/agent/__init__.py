"""A user's own agent, trained through an OpenAI-compatible endpoint the engine serves.

- ``worker`` / ``process``: the user's ``rollout.py`` in its own process;
- ``request``: what a chat-completions request may hold;
- ``session``: one step's rollouts: requests in, completions out, each recorded;
- ``endpoint``: the HTTP door (FastAPI under uvicorn, loopback only);
- ``trajectory``: a recorded rollout as a :class:`~rlab.engine.types.Trajectory`;
- ``play``: a step's groups through all of it.
"""
