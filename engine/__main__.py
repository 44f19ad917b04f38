"""``python -P -m rlab.engine [run options]``: the headless engine (what the TUI spawns)."""

import sys

from rlab.engine.cli.run import engine_main

sys.exit(engine_main())
