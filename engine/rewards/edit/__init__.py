"""Reward edits: everything between a new reward file and the step it applies at.

- ``check``: load a version and score samples or stored groups with it (and
  with the applied version) in the user-code child process
  (``engine.rewards.child``), turning every failure into a clear verdict;
- ``compare``: the dry run's old-versus-new figures (pure numpy);
- ``stored``: the stored groups a dry run re-scores, with their examples;
- ``gate``: the engine's own check of a ``set_rewards`` command before it
  switches versions at a step boundary;
- ``submit``: ``rlab reward RUN FILE``, the editor's path from a shell.
"""
