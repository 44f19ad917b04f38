"""Other tools' artifacts in and out of the run file (``rlab import``/``export``).

One module per format, each with ``detect(path) -> bool`` and
``read(path) -> ImportedRun``; :mod:`rlab.store.formats.write` is the one
path into the store and :mod:`rlab.store.formats.export` the way out.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from rlab.store.errors import UsageError
from rlab.store.formats import art, inspect_eval, trl, verifiers, verl
from rlab.store.formats.base import FormatError, ImportedRun
from rlab.store.formats.write import ImportSummary, write_imported
from rlab.store.records import check_run_name

FORMATS: dict[str, ModuleType] = {
    trl.NAME: trl,
    verifiers.NAME: verifiers,
    art.NAME: art,
    inspect_eval.NAME: inspect_eval,
    verl.NAME: verl,
}
"""Format name -> its module, in detection order."""


def detect_format(path: Path) -> str:
    """The format of the artifacts at ``path``.

    Raises:
        FileNotFoundError: nothing at ``path``.
        FormatError: no known format matches.
    """
    if not path.exists():
        raise FileNotFoundError(f"nothing at {path}; pass the file or folder another tool wrote")
    for name, module in FORMATS.items():
        if module.detect(path):
            return name
    raise FormatError(path, "", "no known format found (TRL completions parquet, verifiers "
                      "results.jsonl + metadata.json, ART trajectories, Inspect .eval, verl "
                      f"dumps); force one with --format {{{','.join(FORMATS)}}}")


def read_path(path: str | Path, format: str | None = None) -> ImportedRun:
    """Read another tool's artifacts at ``path`` (format detected unless given).

    Raises:
        FileNotFoundError: nothing at ``path``.
        FormatError: unknown format, or a malformed file (named with the line
            or field).
    """
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise FormatError(path, "", f"unknown format {format!r}; use one of {', '.join(FORMATS)}")
    if not path.exists():
        raise FileNotFoundError(f"nothing at {path}; pass the file or folder another tool wrote")
    return FORMATS[format or detect_format(path)].read(path)


def import_path(path: str | Path, db: str | Path, *, name: str | None = None,
                format: str | None = None) -> ImportSummary:
    """Import the artifacts at ``path`` as one new run of ``db``, in one
    transaction (a malformed file writes nothing).

    Raises:
        FileNotFoundError, FormatError: as :func:`read_path`.
        ValueError: ``name`` is already taken in ``db``, or is no run name
            (``store.records.check_run_name``: the rule ``rlab run`` applies).
    """
    if name is not None:
        try:
            check_run_name(name)
        except ValueError as err:
            raise UsageError(f"--name {name!r}: {err}") from None
    return write_imported(db, read_path(path, format), name=name)


__all__ = ["FORMATS", "FormatError", "ImportSummary", "detect_format", "import_path", "read_path"]
