"""--out files of ``rlab compare`` and ``rlab inspect`` (eval and select runs
write theirs through ``store.export.export_run``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlab.engine.run.manifest import environment
from rlab.store.secrets import scrub, scrub_text, secret_env_values


def write_artifacts(out_dir: Path, *, summary: dict[str, Any], manifest: dict[str, Any] | None = None,
                    results: list[dict[str, Any]] | None = None) -> dict[str, Path]:
    """Write summary.json, manifest.json (``manifest`` plus the environment
    fingerprint) and, if given, results.jsonl (one object per line) into
    ``out_dir`` (created); credentials scrubbed. Returns name -> path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    secrets = secret_env_values()
    paths = {"summary": out_dir / "summary.json", "manifest": out_dir / "manifest.json"}
    for key, value in (("summary", summary), ("manifest", {**(manifest or {}), "environment": environment()})):
        paths[key].write_text(json.dumps(scrub(value, secrets), indent=2, ensure_ascii=False, default=str) + "\n",
                              encoding="utf-8")
    if results is not None:
        paths["results"] = out_dir / "results.jsonl"
        with paths["results"].open("w", encoding="utf-8") as handle:
            for row in results:
                handle.write(scrub_text(json.dumps(row, ensure_ascii=False, default=str), secrets) + "\n")
    return paths
