"""The run file: SQLite (WAL) schema and migrations, the engine's batched
writer, the TUI's readers, the control channel, secret scrubbing and export.

Imports neither ``engine`` nor ``tui`` (checked by tests/test_layering.py).
"""
