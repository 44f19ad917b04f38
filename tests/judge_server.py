"""A real HTTP server on 127.0.0.1 that answers like the Chat Completions API.

The judge tests run ``RulerJudge`` (and so the real ``openai`` client) against
it. Each test scripts the server's behaviour as a list of :class:`Reply`
(status, message text, delay), consumed one per request; once the script runs
out the last reply repeats. Every request body and its headers are recorded so
tests can assert on the prompt the judge sent.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
                429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}


@dataclass
class Reply:
    """One scripted answer.

    Attributes:
        status: HTTP status code.
        content: the assistant message text (status 200).
        error: the error message (other statuses), sent as
            ``{"error": {"message", "type", "code"}}`` like the real API.
        delay_s: seconds to wait before answering (to trigger time-outs).
        headers: extra response headers, e.g. ``{"retry-after": "0.1"}``.
        usage: (prompt_tokens, completion_tokens) reported on success.
    """

    status: int = 200
    content: str | None = None
    error: str = "scripted error"
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] = (100, 20)


def scores_json(scores: dict[str, float], explanation: str = "ok") -> str:
    """A judge answer in the RULER schema, entries in the dict's order."""
    return json.dumps(
        {"scores": [{"trajectory_id": k, "explanation": f"{explanation} {k}", "score": v}
                    for k, v in scores.items()]}
    )


class ChatCompletionsServer:
    """Context manager serving ``POST /v1/chat/completions`` on an ephemeral port.

    Args:
        replies: the script, one :class:`Reply` per request.
        reject_response_format: answer 400 (as vLLM/llama.cpp do for an
            unsupported parameter) to any request carrying ``response_format``,
            without consuming the script; a :class:`Reply` to answer with
            instead (another status, a message that names nothing).

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1`` once entered.
        requests: the JSON bodies received, in order.
        headers: the request headers received, in order (lower-case names).
        max_in_flight: the most requests it was handling at the same time.
        client_ports: the client's port per request (equal ports: one kept connection).
    """

    def __init__(self, replies: list[Reply], *, reject_response_format: bool | Reply = False) -> None:
        if not replies:
            raise ValueError("give the server at least one Reply to script its answers")
        self.replies = list(replies)
        self.reject_response_format = reject_response_format
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.max_in_flight = 0
        self.client_ports: list[int] = []
        self._in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_port}/v1"
        # a short poll interval makes shutdown() (which waits for one poll) quick
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> ChatCompletionsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _track(self, delta: int) -> None:
        with self._lock:
            self._in_flight += delta
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _next_reply(self, body: dict[str, Any], headers: dict[str, str], port: int) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.client_ports.append(port)
            self.headers.append(headers)
            if self.reject_response_format and "response_format" in body:
                if isinstance(self.reject_response_format, Reply):
                    return self.reject_response_format
                return Reply(status=400, error="response_format is not supported by this server")
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out in two writes; without this, Nagle's
            # algorithm and delayed ACKs add ~40 ms to every answer
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}",
                                               "type": "invalid_request_error", "code": None}})
                    return
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                headers = {k.lower(): v for k, v in self.headers.items()}
                reply = server._next_reply(body, headers, self.client_address[1])
                server._track(+1)
                time.sleep(reply.delay_s)
                server._track(-1)
                if reply.status == 200:
                    payload = _completion(body, reply, len(server.requests))
                else:
                    payload = {"error": {"message": reply.error,
                                         "type": _ERROR_TYPES.get(reply.status, "error"),
                                         "code": reply.status}}
                self._send(reply.status, payload, reply.headers)

            def _send(self, status: int, payload: dict[str, Any],
                      extra: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in (extra or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up first

        return Handler


def _completion(body: dict[str, Any], reply: Reply, n: int) -> dict[str, Any]:
    prompt_tokens, completion_tokens = reply.usage
    return {
        "id": f"chatcmpl-test{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": reply.content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
