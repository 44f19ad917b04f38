"""The HTTP client under the judge's openai client: a time limit per request, every request logged.

The openai client retries HTTP 408/409/429/5xx and failed connections
itself, honouring ``Retry-After``, so the judge sees only the last outcome
of a ``create()`` call. :class:`JudgeHttpClient` is the httpx client handed
to it (``openai.AsyncOpenAI(http_client=...)``); every request the openai
client sends goes through its ``send``, which logs it in the
:class:`AttemptLog` of the judge call that sent it (several groups share
one client; ``send`` runs in the task awaiting it, where
:meth:`AttemptLog.watching` has set a context variable). Event hooks
(``event_hooks=``) would count requests too, but never see a request that
got no response, so they could not say why it failed.

The time limit is this client's, on the whole request: httpx's own is per
read, so a server that trickles bytes would never time out. A request over
the limit raises ``httpx2.ReadTimeout`` (openai 3 sends through httpx2), which the openai client retries as
it retries its own time-outs (issue 46: one retry policy, the client's).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import httpx2
import openai

#: What to do about the permanent HTTP errors people hit first.
_FIXES = {
    401: " (fix: pass api_key or set OPENAI_API_KEY)",
    404: " (fix: check base_url, which ends in /v1, and the model name the server serves)",
}


class AttemptLog:
    """The HTTP requests of one judge call.

    Attributes:
        attempts: requests sent, the openai client's retries included.
        errors: one message per failed request, oldest first (the judge adds
            one for each answer it cannot read).
    """

    def __init__(self) -> None:
        self.attempts = 0
        self.errors: list[str] = []

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Log here the requests :class:`JudgeHttpClient` sends inside the block."""
        token = _CURRENT.set(self)
        try:
            yield
        finally:
            _CURRENT.reset(token)


_CURRENT: contextvars.ContextVar[AttemptLog | None] = contextvars.ContextVar("judge_attempt_log", default=None)


class JudgeHttpClient(openai.DefaultAsyncHttpxClient):
    """httpx's async client with the openai client's defaults, a time limit per
    request, and each request logged in the :class:`AttemptLog` watching it.

    Args:
        timeout_s: seconds one request may take, from connecting to its last
            byte (> 0). Give the openai client ``timeout=None``: its own
            time-out would be retried by it.
    """

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self.timeout_s = timeout_s

    async def send(self, request: Any, **kwargs: Any) -> Any:
        """httpx's ``send``, within :attr:`timeout_s` and logged.

        Raises:
            httpx2.ReadTimeout: no whole response within :attr:`timeout_s`.
            httpx's errors, as ``send`` (a refused connection, ...).
        """
        log = _CURRENT.get() or AttemptLog()  # a request no judge call watches is logged nowhere
        log.attempts += 1
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await super().send(request, **kwargs)
        except TimeoutError:
            log.errors.append("request timed out")
            raise httpx2.ReadTimeout(f"no whole response within {self.timeout_s} s", request=request) from None
        except Exception as exc:  # httpx's transport errors, which the openai client retries
            log.errors.append(f"connection failed (is the judge server up at base_url?): {exc}")
            raise
        if response.status_code >= 400:
            await response.aread()
            log.errors.append(describe_status(response.status_code, _json_or_none(response)))
        return response


def _json_or_none(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def describe_status(status_code: int, body: Any) -> str:
    """``"HTTP 429: <the server's message>"``, with the fix for a 401 or 404.

    Args:
        status_code: the response's HTTP status.
        body: the response's JSON (None when it is not JSON); the message is
            ``body["error"]["message"]`` or ``body["message"]``, where the
            openai client reads it.
    """
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return f"HTTP {status_code}: {message or f'Error code: {status_code}'}{_FIXES.get(status_code, '')}"
