"""``python -P -m rlab.engine.cli [command] [options]``: ``rlab``, without the installed script."""

import sys

from rlab.engine.cli.main import main

sys.exit(main())
