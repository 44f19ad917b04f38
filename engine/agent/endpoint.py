"""The endpoint: OpenAI's chat-completions API on loopback, served while a run trains.

A FastAPI app under uvicorn, on a thread of the engine process, bound to
127.0.0.1 on a free port (nothing beyond this host can reach it). Every
request must carry the run's key (``Authorization: Bearer KEY``, a random
key per run; 401 otherwise). A rollout's base URL names it::

    http://127.0.0.1:PORT/rollouts/<rollout key>/v1

so the ``openai`` client a rollout is given needs no change: its
``chat.completions.create`` posts to ``.../v1/chat/completions`` and
``models.list`` gets ``.../v1/models``. Requests are answered by the open
:class:`~rlab.engine.agent.session.RolloutSession` (one a step); between
steps, or for a key it does not hold, the answer is 404.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openai.types import Model
from openai.types.chat import ChatCompletion

from rlab.engine.agent.session import EndpointError, RolloutSession
from rlab.engine.policy.continuous import SamplerStopped

#: Seconds the server gets to start listening.
START_TIMEOUT_S = 30.0


class Endpoint:
    """The run's endpoint: started once, serving whatever session is open.

    Attributes:
        key: the run's API key (random, 32 hex characters).
        model: the model name requests must ask for.
        port: the port it listens on (127.0.0.1 only), once started.
        session: the open step's session, or None between steps.
    """

    def __init__(self, model: str) -> None:
        self.key = secrets.token_hex(16)
        self.model = model
        self.port = 0
        self.session: RolloutSession | None = None
        self._server = uvicorn.Server(uvicorn.Config(self._app(), host="127.0.0.1", port=0, log_level="warning",
                                                     lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, name="rlab-endpoint", daemon=True)

    def start(self) -> None:
        """Listen (returns once it does).

        Raises:
            RuntimeError: the server did not start within :data:`START_TIMEOUT_S`.
        """
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the agent endpoint did not start listening on 127.0.0.1")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]

    def base_url(self, rollout_key: str) -> str:
        """The OpenAI base URL that names rollout ``rollout_key``."""
        return f"http://127.0.0.1:{self.port}/rollouts/{rollout_key}/v1"

    def close(self) -> None:
        """Stop listening."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _app(self) -> FastAPI:
        app = FastAPI(title="Rollout Lab agent endpoint", docs_url=None, redoc_url=None, openapi_url=None)

        @app.middleware("http")
        async def require_key(request: Request, call_next: Any) -> Any:
            if request.headers.get("authorization", "") != f"Bearer {self.key}":
                return _error(401, "invalid_api_key", "missing or wrong API key: use the client the rollout was given")
            return await call_next(request)

        @app.get("/rollouts/{rollout_key}/v1/models")
        async def models(rollout_key: str) -> dict[str, Any]:
            model = Model(id=self.model, created=0, object="model", owned_by="rollout-lab")
            return {"object": "list", "data": [model.model_dump()]}

        @app.post("/rollouts/{rollout_key}/v1/chat/completions")
        async def chat(rollout_key: str, request: Request) -> Any:
            session = self.session
            try:
                body = await request.json()
            except ValueError:
                return _error(400, "invalid_json", "the request body is not JSON")
            if session is None:
                return _error(404, "rollout_not_found", f"no open rollout {rollout_key!r}: the step has ended")
            try:
                completion: ChatCompletion = await session.complete(rollout_key, body)
            except EndpointError as err:
                return _error(err.status, err.code, err.message)
            except SamplerStopped as err:
                return _error(503, "step_ended", str(err))
            return JSONResponse(completion.model_dump(mode="json", exclude_none=True))

        return app


def _error(status: int, code: str, message: str) -> JSONResponse:
    """OpenAI's error body, which the ``openai`` client raises as ``APIStatusError``."""
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": code}},
                        status_code=status)
