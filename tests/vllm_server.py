"""A real HTTP server on 127.0.0.1 that answers like vLLM's OpenAI-compatible API.

It serves what :class:`engine.policy.vllm.VLLMBackend` uses, in the shapes
vLLM gives them (``vllm/entrypoints/openai/serving_completion.py`` and
``serving_models.py``):

- ``POST /v1/completions``: prompts as token ids (one list or a list of
  lists), ``n`` completions each, choices numbered ``prompt * n + j``,
  ``logprobs`` as ``{"tokens", "token_logprobs", "top_logprobs",
  "text_offset"}`` with tokens spelled ``token_id:<id>`` when
  ``return_tokens_as_token_ids`` is set; an unknown model is a 404.
- ``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter``: plain-text
  ``Success: ...`` bodies; an already loaded name is a 400, a path without
  ``adapter_config.json`` a 404 ("No adapter found"), an adapter whose rank
  exceeds ``max_lora_rank`` a 400. With ``runtime_lora=False`` the routes do
  not exist (FastAPI's ``{"detail": "Not Found"}``), as in vLLM without
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``.
- ``GET /v1/models``: the base model and the loaded adapters (``parent`` set).

Generation is a deterministic function of (model, prompt, request number):
token ids in [3, vocab), EOS with probability 1/4 per token, log-probs in
(-3, 0). Failures are scripted per path with :meth:`VLLMServer.fail_next`.
Every request is recorded as ``(path, body)``.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Failure:
    """One scripted failure: an HTTP status with a vLLM error body, or raw bytes."""

    status: int
    message: str = "scripted failure"
    raw: bytes | None = None


class VLLMServer:
    """Context manager serving the vLLM endpoints above on an ephemeral port.

    Args:
        base_model: the served base model name.
        runtime_lora: whether the LoRA load/unload routes exist.
        max_lora_rank: the largest adapter rank accepted (vLLM's ``--max-lora-rank``).
        eos_id: the token id ending a completion.
        vocab: token ids are drawn from [3, vocab).
        reverse_choices: send choices in reverse order (clients must sort by ``index``).
        port: the TCP port; 0 lets the OS pick one.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1`` once entered.
        requests: ``(path, body)`` per request received, in order.
        adapters: loaded adapter name -> path.
        completions: per completions request, the choices it answered.
    """

    def __init__(self, base_model: str = "base-model", *, runtime_lora: bool = True, max_lora_rank: int = 16,
                 eos_id: int = 2, vocab: int = 64, reverse_choices: bool = False, port: int = 0) -> None:
        self.base_model = base_model
        self.runtime_lora = runtime_lora
        self.max_lora_rank = max_lora_rank
        self.eos_id = eos_id
        self.vocab = vocab
        self.reverse_choices = reverse_choices
        self.port = port
        self.requests: list[tuple[str, Any]] = []
        self.adapters: dict[str, str] = {}
        self.completions: list[list[dict]] = []
        self._failures: dict[str, list[Failure]] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    def fail_next(self, path: str, failure: Failure, times: int = 1) -> None:
        """Answer the next ``times`` requests to ``path`` (e.g. ``/v1/completions``) with ``failure``."""
        self._failures.setdefault(path, []).extend([failure] * times)

    def model_requests(self) -> list[str]:
        """The ``model`` field of each completions request, in order."""
        return [body["model"] for path, body in self.requests if path == "/v1/completions"]

    def __enter__(self) -> "VLLMServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                server._record(self.path, None)
                if self.path == "/v1/models":
                    return _send_json(self, 200, server._models())
                _send_json(self, 404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                body = json.loads(raw or b"{}")
                server._record(self.path, body)
                failure = server._pop_failure(self.path)
                if failure is not None:
                    return _send_failure(self, failure)
                status, answer = server._route(self.path, body)
                if isinstance(answer, str):
                    return _send_text(self, status, answer)
                _send_json(self, status, answer)

            def log_message(self, *args):  # keep test output clean
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        serve = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        serve.start()
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _record(self, path: str, body: Any) -> None:
        with self._lock:
            self.requests.append((path, body))

    def _pop_failure(self, path: str) -> Failure | None:
        with self._lock:
            queue = self._failures.get(path)
            return queue.pop(0) if queue else None

    def _route(self, path: str, body: dict) -> tuple[int, Any]:
        if path == "/v1/completions":
            return self._complete(body)
        if path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter") and self.runtime_lora:
            return self._load(body) if path.endswith("/load_lora_adapter") else self._unload(body)
        return 404, {"detail": "Not Found"}

    def _models(self) -> dict:
        cards = [{"id": self.base_model, "object": "model", "root": self.base_model, "parent": None}]
        cards += [{"id": n, "object": "model", "root": p, "parent": self.base_model}
                  for n, p in self.adapters.items()]
        return {"object": "list", "data": cards}

    def _complete(self, body: dict) -> tuple[int, dict]:
        model = body.get("model")
        if model != self.base_model and model not in self.adapters:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
        n, max_tokens = body.get("n", 1), body.get("max_tokens", 16)
        with self._lock:
            request_no = len(self.completions)
        choices = [
            self._choice(i * n + j, model, prompt, max_tokens, request_no, body)
            for i, prompt in enumerate(prompts) for j in range(n)
        ]
        with self._lock:
            self.completions.append(choices)
        sent = list(reversed(choices)) if self.reverse_choices else choices
        n_out = sum(len(c["logprobs"]["tokens"]) for c in choices)
        n_in = sum(len(p) for p in prompts)
        return 200, {"id": f"cmpl-{request_no}", "object": "text_completion", "created": 0, "model": model,
                     "choices": sent,
                     "usage": {"prompt_tokens": n_in, "completion_tokens": n_out,
                               "total_tokens": n_in + n_out}}

    def _choice(self, index: int, model: str, prompt: list[int], max_tokens: int, request_no: int,
                body: dict) -> dict:
        rng = random.Random(json.dumps([model, prompt, index, request_no]))
        ids = []
        while len(ids) < max_tokens:
            ids.append(self.eos_id if rng.random() < 0.25 else rng.randrange(3, self.vocab))
            if ids[-1] == self.eos_id:
                break
        logprobs = [round(-3 * rng.random(), 6) for _ in ids]
        as_ids = body.get("return_tokens_as_token_ids")
        tokens = [f"token_id:{t}" if as_ids else _char(t) for t in ids]
        text = "".join(_char(t) for t in ids if t != self.eos_id)
        return {
            "index": index, "text": text, "stop_reason": None,
            "finish_reason": "stop" if ids[-1] == self.eos_id else "length",
            "logprobs": {"text_offset": list(range(len(ids))), "tokens": tokens, "token_logprobs": logprobs,
                         "top_logprobs": [{tok: lp} for tok, lp in zip(tokens, logprobs)]},
        }

    def _load(self, body: dict) -> tuple[int, Any]:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return _error(400, "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput")
        if name in self.adapters:
            return _error(400, f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput")
        config = Path(path) / "adapter_config.json"
        if not config.is_file():
            return _error(404, f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError")
        rank = json.loads(config.read_text())["r"]
        if rank > self.max_lora_rank:
            return _error(400, f"LoRA rank {rank} is greater than max_lora_rank {self.max_lora_rank}.",
                          "BadRequestError")
        self.adapters[name] = path
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def _unload(self, body: dict) -> tuple[int, Any]:
        name = body.get("lora_name")
        if name not in self.adapters:
            return _error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
        del self.adapters[name]
        return 200, f"Success: LoRA adapter '{name}' removed successfully."


def _char(token: int) -> str:
    return chr(ord("a") + token % 26)


def _error(status: int, message: str, kind: str) -> tuple[int, dict]:
    """vLLM's ErrorResponse (recent versions): ``{"error": {"message", "type", "param", "code"}}``."""
    return status, {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _send_failure(handler: BaseHTTPRequestHandler, failure: Failure) -> None:
    if failure.raw is not None:
        handler.send_response(failure.status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(failure.raw)))
        handler.end_headers()
        handler.wfile.write(failure.raw)
        return
    status, body = _error(failure.status, failure.message, "InternalServerError")
    _send_json(handler, status, body)


def _send_json(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _send_text(handler: BaseHTTPRequestHandler, status: int, text: str) -> None:
    # vLLM's LoRA routes return a bare starlette Response: a body and no media type.
    data = text.encode()
    handler.send_response(status)
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
