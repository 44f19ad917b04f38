"""``rlab``'s entry point under its former name, ``rlab.tui.cli:main``, for the installers
that name it (the GPU kit's install.sh, ../shared/gpu-kit); the command line is
:mod:`rlab.engine.cli`."""

from rlab.engine.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":  # python -m rlab.tui.cli, as older scripts call it
    import sys

    sys.exit(main())
