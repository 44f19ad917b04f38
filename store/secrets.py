"""Keep credentials out of the run file, exports and manifests.

Two rules, applied by the writer to every text it stores (configs,
manifests, event and command payloads, judge call fields, rubric sources,
and every text column of groups, trajectories and steps), by the exporter,
and to the engine's stdout/stderr (its log):

1. By key name: the value of a mapping key that names a credential is
   replaced by ``REDACTED``. Credential names: ``api_key``/``apikey``,
   anything ending in ``_key`` except known non-secret keys (``state_key``,
   ``sort_key``...), ``secret``/``*_secret``, ``password``/``passwd``/
   ``passphrase``, ``token``/``*_token`` except tokenizer special tokens
   (``eos_token``...), ``authorization``, ``cookie``, ``credentials``. Token
   *counts* (``max_tokens``, ``completion_tokens``, ``num_tokens``) are kept:
   a plural ``tokens`` never names a credential.
2. By value: any occurrence, in any string, of the value of an environment
   variable whose name contains KEY, TOKEN, SECRET or PASSWORD (values of
   at least ``MIN_SECRET_LENGTH`` characters; shorter ones are not
   credentials and would redact ordinary text), and strings shaped like
   well-known API keys (``sk-...``, ``hf_...``, ``Bearer ...``).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

REDACTED = "REDACTED"
MIN_SECRET_LENGTH = 6

_SECRET_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
_SECRET_KEY_NAME = re.compile(
    r"(^|_)(api_?key|key|secret|password|passwd|passphrase|token|authorization|cookie|credentials?)$"
)
_NON_SECRET_KEY_NAMES = {
    "state_key", "initial_state_key", "sort_key", "cache_key", "primary_key",
    "foreign_key", "group_key", "dataset_key", "example_key", "metric_key",
    "pad_token", "eos_token", "bos_token", "unk_token", "sep_token", "cls_token",
    "mask_token",
}
_KEY_MARKERS = ("sk-", "hf_", "Bearer ")
_KEY_SHAPED = re.compile(r"\b(sk-[A-Za-z0-9_\-]{16,}|hf_[A-Za-z0-9]{20,})|(?<=Bearer )[A-Za-z0-9._\-]{16,}")


def is_secret_key(name: str) -> bool:
    """Whether a mapping key names a credential (rule 1 of the module doc)."""
    normalised = name.strip().lower().replace("-", "_")
    if normalised in _NON_SECRET_KEY_NAMES:
        return False
    return _SECRET_KEY_NAME.search(normalised) is not None


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of credential-named environment variables, longest first, each
    also as it appears inside a JSON string (quotes and backslashes escaped)."""
    environ = os.environ if environ is None else environ
    values = {
        form
        for name, value in environ.items()
        if _SECRET_ENV_NAME.search(name) and len(value) >= MIN_SECRET_LENGTH
        for form in (value, json.dumps(value, ensure_ascii=False)[1:-1])
    }
    return sorted(values, key=len, reverse=True)


def needs_scrub(text: str, secrets: list[str]) -> bool:
    """Whether ``text`` may hold a credential (a secret value or a key marker):
    the cheap test that lets the writer skip scrubbing clean text."""
    return any(marker in text for marker in _KEY_MARKERS) or any(s in text for s in secrets)


def scrub_text(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every secret value and key-shaped string replaced.

    ``secrets`` defaults to ``secret_env_values()`` (read on each call so a
    key set after import is still caught).
    """
    for secret in secret_env_values() if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    # The substring test is ~50x cheaper than the regex on text with no key.
    if any(marker in text for marker in _KEY_MARKERS):
        text = _KEY_SHAPED.sub(REDACTED, text)
    return text


def scrub(value: Any, secrets: list[str] | None = None) -> Any:
    """A copy of a JSON-like value with credentials redacted (both rules).

    Walks dicts, lists and tuples (tuples become lists); other scalars are
    returned as they are.
    """
    secrets = secret_env_values() if secrets is None else secrets
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, Mapping):
        return {
            key: REDACTED if isinstance(key, str) and is_secret_key(key) and item is not None
            else scrub(item, secrets)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [scrub(item, secrets) for item in value]
    return value


#: Characters a :class:`StreamScrubber` holds back of a line that has not ended:
#: more than any key-shaped string is long (a Bearer JWT runs to a few KB).
KEY_HOLD_CHARS = 4096


class StreamScrubber:
    """Scrubs text that arrives in pieces (a child's output, read 8 KB at a
    time), where one credential may be split between two pieces and neither
    piece holds it whole.

    :meth:`feed` returns, scrubbed, the text up to the last line break and
    holds the line in progress back (a key may still be arriving); of a line
    longer than ``KEY_HOLD_CHARS`` (and the longest secret) it returns all
    but that many characters, never cutting through a secret. When a secret
    value spans lines, whole lines are held back in the same way.
    :meth:`close` returns what is held, scrubbed.

    Args:
        secrets: secret values (default: ``secret_env_values()`` now).
    """

    def __init__(self, secrets: list[str] | None = None) -> None:
        self.secrets = secret_env_values() if secrets is None else secrets
        self._hold = max([KEY_HOLD_CHARS, *map(len, self.secrets)])
        self._by_line = not any("\n" in secret for secret in self.secrets)
        self._held = ""

    def feed(self, text: str) -> str:
        """The text now safe to pass on, scrubbed (possibly ``""``)."""
        text = self._held + text
        line_end = text.rfind("\n") + 1 if self._by_line else 0
        cut = max(line_end, len(text) - self._hold)
        # Never cut through a secret: its halves would pass scrubbing as two harmless pieces. The held
        # part stays raw: scrubbed now, a key still arriving would be redacted to its first 16 characters.
        cut = min([cut, *(start for start, end in _secret_spans(text, self.secrets) if start < cut < end)])
        self._held = text[cut:]
        return scrub_text(text[:cut], self.secrets)

    def close(self) -> str:
        """The text held back, scrubbed: the stream has ended."""
        held, self._held = self._held, ""
        return scrub_text(held, self.secrets)


def _secret_spans(text: str, secrets: list[str]) -> list[tuple[int, int]]:
    """(start, end) of every secret value and key-shaped string in ``text``."""
    spans = [(m.start(), m.start() + len(secret)) for secret in secrets for m in re.finditer(re.escape(secret), text)]
    if any(marker in text for marker in _KEY_MARKERS):
        spans += [m.span() for m in _KEY_SHAPED.finditer(text)]
    return spans


class ScrubbingStream(io.TextIOBase):
    """A text stream that scrubs credentials from what is written to it,
    then passes it on to ``target`` (a process's stdout or stderr).

    Args:
        target: the stream written to.
        secrets: secret values (default: ``secret_env_values()`` now).
    """

    def __init__(self, target: TextIO, secrets: list[str] | None = None) -> None:
        super().__init__()
        self.target = target
        self.secrets = secret_env_values() if secrets is None else secrets

    def write(self, text: str) -> int:
        """Write ``text`` scrubbed; returns ``len(text)`` (what the caller gave)."""
        self.target.write(scrub_text(text, self.secrets))
        return len(text)

    def flush(self) -> None:
        """Flush the target."""
        self.target.flush()

    def isatty(self) -> bool:
        """Whether the target is a terminal."""
        return self.target.isatty()

    def fileno(self) -> int:
        """The target's file descriptor."""
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The target's encoding."""
        return self.target.encoding


def scrub_streams() -> None:
    """Scrub everything this process prints from now on (its log): wraps
    ``sys.stdout`` and ``sys.stderr`` in :class:`ScrubbingStream`
    (tracebacks and ``logging`` write there too). Idempotent."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, ScrubbingStream):
            setattr(sys, name, ScrubbingStream(stream))
