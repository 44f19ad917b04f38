"""engine.run.manifest.sha256_files: the weights' digest as documented, read once per file state."""

from __future__ import annotations

import hashlib
import os

from rlab.engine.run import manifest
from rlab.engine.run.manifest import sha256_files


def test_the_digest_covers_names_and_bytes_in_name_order_and_follows_a_rewrite(tmp_path):
    (tmp_path / "b.safetensors").write_bytes(b"second")
    (tmp_path / "a.safetensors").write_bytes(b"first")
    (tmp_path / "notes.txt").write_bytes(b"not weights")
    expected = hashlib.sha256(b"a.safetensors" + b"first" + b"b.safetensors" + b"second").hexdigest()
    assert sha256_files(tmp_path) == expected
    (tmp_path / "a.safetensors").write_bytes(b"FIRST")  # same size, new bytes
    os.utime(tmp_path / "a.safetensors", ns=(1, 10**18))
    assert sha256_files(tmp_path) == hashlib.sha256(b"a.safetensorsFIRSTb.safetensorssecond").hexdigest()


def test_a_second_ask_for_unchanged_files_reads_nothing(tmp_path, monkeypatch):
    (tmp_path / "model.safetensors").write_bytes(b"weights" * 1000)
    first = sha256_files(tmp_path)
    opened = []
    original = manifest.Path.open
    monkeypatch.setattr(manifest.Path, "open", lambda self, *a, **kw: opened.append(self) or original(self, *a, **kw))
    assert sha256_files(tmp_path) == first and opened == []
