"""Packaging's one computed part: the package list (the rest is in pyproject.toml).

The four top-level folders install under one namespace (``engine`` as
``rlab.engine``, and so on), so nothing generic lands in site-packages and a
user's own ``engine/`` or ``scenarios/`` folder never shadows ours.
setuptools finds the packages in them, so adding a scenario is adding a
folder (``tests/test_packaging.py`` checks the wheel has every one).
"""

from setuptools import find_packages, setup

#: The folders that install under ``rlab.``.
TOP_LEVEL = ("engine", "store", "tui", "scenarios")


def rlab_packages() -> list[str]:
    """Every package under the top-level folders, named under ``rlab.``."""
    found = find_packages(include=[*TOP_LEVEL, *(f"{top}.*" for top in TOP_LEVEL)])
    return [f"rlab.{name}" for name in found]


if __name__ == "__main__":
    setup(package_dir={f"rlab.{top}": top for top in TOP_LEVEL}, packages=rlab_packages())
