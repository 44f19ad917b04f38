"""The ``rlab`` command line, one module per command group (:mod:`rlab.engine.cli.main` dispatches).

- :mod:`.run`: run, fork, set, and the headless engine (``python -m rlab.engine``);
- :mod:`.watch`: watch (the TUI, through :mod:`.frontend`);
- :mod:`.files`: runs, export, import, index;
- :mod:`.loops`: eval, select, compare, inspect (rendered by :mod:`.reports`);
- :mod:`.control`: pause, resume, step, stop, reward;
- :mod:`.serve`: serve.

Shared: :mod:`.options` (the run options, generated from RunConfig, and the
engine's command line), :mod:`.checks` (a run's options checked before it
starts), :mod:`.errors` (one ``rlab: error:`` line, or a traceback kept),
:mod:`.parsers` (``--db`` and argument types), :mod:`.formatting` (numbers and
names as the reports and the TUI print them).
"""
