"""Rollouts from a vLLM server through its OpenAI-compatible API.

Generation is the slow half of an RL step; vLLM makes it fast. The server is
started once on the base model with LoRA enabled (``rlab serve MODEL --lora``
does it, see :mod:`engine.policy.vllm_launch`; ``rlab run --backend vllm``
without ``--vllm-url`` starts one itself)::

    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True python -m vllm.entrypoints.openai.api_server \\
        --model MODEL --enable-lora --max-lora-rank 16 --logprobs-mode processed_logprobs

Each step, :meth:`VLLMBackend.sample` asks ``POST /v1/completions`` for one
sampled completion per prompt (prompts sent as token ids) with the sampled
tokens' log-probabilities, returned as ``token_id:<id>`` strings
(``return_tokens_as_token_ids``), so the token ids trained are exactly those
sampled. After each update, :meth:`VLLMBackend.sync_policy` saves the LoRA
adapter and loads it under a new name through vLLM's runtime LoRA endpoints
(``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``), and later requests
name that adapter, so rollouts always come from the current policy and the
importance ratio's denominator is the server's log-probability.

``--logprobs-mode processed_logprobs`` (vLLM >= 0.10.2) makes those
log-probabilities the ones of the distribution actually sampled from
(temperature applied), which is what the trainer compares against
(``logits / temperature``); vLLM's default reports the raw model's.
The ``vllm`` package itself is never imported here: this is an HTTP client.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import openai

from rlab.engine.policy.kv import PrefixCache
from rlab.engine.types import Sample
from rlab.store.errors import UsageError

TOKEN_ID_PREFIX = "token_id:"
RUNTIME_LORA_FIX = (
    "start the server with --enable-lora and the environment variable "
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
)


class VLLMError(UsageError, RuntimeError):
    """The vLLM server could not be reached, refused a request or answered oddly.

    The message says what failed and how to fix it.
    """


class VLLMBackend:
    """Sample completions from a vLLM server; keep its LoRA adapter in step with training.

    Args:
        base_url: the server's OpenAI-compatible root, e.g. ``http://localhost:8000/v1``.
        model: the served base model name (what ``GET /v1/models`` lists; by
            default vLLM serves a model under the path given to ``vllm
            serve``). ``None``: the first base model the server lists.
        render: ``(messages, tools) -> prompt token ids`` (``Policy.render``), so the
            backend can stand in wherever a policy is expected.
        api_key: sent as the bearer token (vLLM's ``--api-key``).
        timeout_s: per-request time-out, seconds; one request carries a
            whole batch of rollouts, so leave room for the longest (a
            request that times out is retried from scratch).
        max_retries: retries of connection errors, 408/409/429 and 5xx
            answers (the ``openai`` client's back-off).
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        render: Callable[[list[dict], list[dict] | None], list[int]] | None = None,
        api_key: str = "EMPTY",
        timeout_s: float = 600.0,
        max_retries: int = 3,
    ) -> None:
        self.base_url = base_url
        self.base_model = model
        self._render = render
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s,
                                     max_retries=max_retries)
        self.adapter: str | None = None
        self._adapter_path: Path | None = None

    @property
    def current_model(self) -> str:
        """The model name requests go to: the latest loaded adapter, else the base model."""
        return self.adapter or self._base()

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """Prompt token ids for ``messages`` (and ``tools``) through the renderer given at construction.

        Raises:
            TypeError: no ``render`` was given.
        """
        if self._render is None:
            raise TypeError("VLLMBackend was built without render=; pass render=policy.render")
        return self._render(messages, tools)

    def served_models(self) -> list[dict]:
        """The server's ``GET /v1/models`` entries (dicts with ``id``, ``root``, ``parent``).

        Raises:
            VLLMError: the server cannot be reached or answered with an error.
        """
        page = self._call("list the models", self._client.models.list)
        return [m.model_dump() for m in page.data]

    def sample(
        self, prompt_ids: list[list[int]], *, max_new_tokens: int, temperature: float = 1.0,
        cache: PrefixCache | None = None,
    ) -> list[Sample]:
        """Sample one completion per prompt from the current policy (same contract as ``Policy.sample``).

        Args:
            prompt_ids: B prompts, each a non-empty list of token ids.
            max_new_tokens: generation budget per completion, tokens (> 0).
            temperature: softmax temperature; 0 is greedy. top-p, top-k and
                repetition penalty are switched off explicitly, because vLLM
                otherwise applies the model's ``generation_config.json``.
            cache: ignored: the server caches prompt prefixes itself (vLLM's
                automatic prefix caching), so the turns of an episode reuse it.

        If the server no longer knows the current adapter (it was restarted),
        the adapter is loaded again from its directory and the request retried once.

        Returns:
            B :class:`Sample` s in prompt order: the sampled token ids (EOS
            included when the server stopped on it), the text, the server's
            log-probability of each token (nats) and ``truncated`` when the
            server stopped at ``max_new_tokens`` (``finish_reason == "length"``).

        Raises:
            ValueError: empty prompts or a non-positive budget.
            VLLMError: the request failed after retries or the answer lacks
                token ids / log-probabilities.
        """
        if not prompt_ids or any(not p for p in prompt_ids):
            raise ValueError("sample needs at least one prompt and no empty prompt")
        if max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be > 0, got {max_new_tokens}")
        request = dict(
            prompt=[list(p) for p in prompt_ids],
            n=1,
            max_tokens=max_new_tokens,
            temperature=temperature,
            top_p=1.0,
            logprobs=1,
            extra_body={"return_tokens_as_token_ids": True, "top_k": -1, "repetition_penalty": 1.0},
        )
        create = self._client.completions.create
        try:
            completion = self._call("sample completions", create, model=self.current_model, **request)
        except _ModelNotFound:
            if self.adapter is None or self._adapter_path is None:
                raise
            self.load_adapter(self.adapter, self._adapter_path)
            completion = self._call("sample completions", create, model=self.current_model, **request)
        return parse_completion(completion, len(prompt_ids))

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Load the adapter saved in ``path`` into the server as model ``name``.

        ``path`` must be readable by the server (same machine or a shared
        filesystem); it is sent as an absolute path. A name the server already
        holds (e.g. after a restart of the run) is unloaded and loaded again.

        Raises:
            VLLMError: runtime LoRA loading is off (404 without a JSON error),
                the path holds no adapter, the adapter's rank exceeds the
                server's ``--max-lora-rank``, or the server failed.
        """
        body = {"lora_name": name, "lora_path": str(Path(path).resolve())}
        try:
            self._lora_call("/load_lora_adapter", body)
        except VLLMError as err:
            if "already been loaded" not in str(err):
                raise
            self._lora_call("/unload_lora_adapter", {"lora_name": name})
            self._lora_call("/load_lora_adapter", body)

    def unload_adapter(self, name: str) -> None:
        """Unload adapter ``name`` from the server; one it does not hold is fine.

        Raises:
            VLLMError: runtime LoRA loading is off, or the server failed.
        """
        try:
            self._lora_call("/unload_lora_adapter", {"lora_name": name})
        except _AdapterNotFound:
            pass

    def sync_policy(self, model, step: int, adapter_dir: str | Path) -> str:
        """Make the server sample from ``model``'s current adapter; return the new model name.

        Saves the adapter to ``adapter_dir/step-<step>``, loads it as
        ``rlab-step-<step>``, sends later requests there, then unloads the
        previous adapter and deletes its directory (the server has its
        weights in memory), so server memory and disk stay bounded.

        Raises:
            VLLMError: ``model`` has no LoRA adapter (the vLLM backend needs
                LoRA), or loading failed (the backend keeps the previous adapter).
        """
        path = save_step_adapter(model, step, adapter_dir)
        name = adapter_name(step)
        previous_path = self.switch_adapter(name, path)
        if previous_path is not None:
            shutil.rmtree(previous_path, ignore_errors=True)
        return name

    def switch_adapter(self, name: str, path: Path) -> Path | None:
        """Load adapter ``name`` from ``path``, send later requests there, unload the previous one.

        Returns the previous adapter's directory (for the caller to delete),
        None when there was none or it had the same name.

        Raises:
            VLLMError: loading failed (the backend keeps the previous adapter).
        """
        self.load_adapter(name, path)
        previous, previous_path = self.adapter, self._adapter_path
        self.adapter, self._adapter_path = name, path
        if previous is None or previous_path is None or previous == name:
            return None
        self.unload_adapter(previous)
        return previous_path

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def _base(self) -> str:
        if self.base_model is None:
            bases = [m["id"] for m in self.served_models() if not m.get("parent")]
            if not bases:
                raise VLLMError(f"the server at {self.base_url} lists no base model; check `vllm serve`")
            self.base_model = bases[0]
        return self.base_model

    def _lora_call(self, path: str, body: dict) -> str:
        try:
            return self._client.post(path, cast_to=str, body=body)
        except openai.NotFoundError as err:
            if _is_missing_route(err):
                raise VLLMError(
                    f"{self.base_url}{path} does not exist: runtime LoRA updating is off; {RUNTIME_LORA_FIX}"
                ) from err
            raise _AdapterNotFound(
                f"vLLM {path} {body.get('lora_name')!r}: {_message(err)}; the adapter path must exist "
                "on the server's machine and hold adapter_config.json"
            ) from err
        except openai.BadRequestError as err:
            raise VLLMError(
                f"vLLM refused {path} {body}: {_message(err)}; check the server runs with --enable-lora "
                "and a --max-lora-rank at least the adapter's rank"
            ) from err
        except (openai.APIStatusError, openai.APIConnectionError) as err:
            raise _wrap(err, f"call {path}", self.base_url) from err

    def _call(self, what: str, fn, **kwargs):
        try:
            return fn(**kwargs)
        except openai.NotFoundError as err:
            raise _ModelNotFound(
                f"vLLM could not {what}: {_message(err)}; the model name must be one the server lists "
                f"(GET {self.base_url}/models), e.g. the path given to `vllm serve` "
                "or its --served-model-name"
            ) from err
        except (openai.APIStatusError, openai.APIConnectionError) as err:
            raise _wrap(err, what, self.base_url) from err
        except ValueError as err:  # json.JSONDecodeError: a 200 whose body is not JSON
            raise VLLMError(f"vLLM answered a request to {what} with a body that is not JSON: {err}") from err


class ServerDown(VLLMError):
    """The server did not answer (connection refused, time-out) or failed with HTTP 5xx after retries."""


def save_step_adapter(model, step: int, adapter_dir: str | Path) -> Path:
    """Save ``model``'s LoRA adapter to ``adapter_dir/step-<step>``; return that directory.

    Raises:
        VLLMError: ``model`` has no LoRA adapter (the vLLM backend needs LoRA).
    """
    # peft/torch load here, not at import: `rlab run` checks its options without torch.
    from rlab.engine.policy.lora import is_lora, save_adapter

    if not is_lora(model):
        raise VLLMError("the vllm backend trains through LoRA adapters; pass --lora-rank > 0")
    return save_adapter(model, Path(adapter_dir) / f"step-{step}")


def adapter_name(step: int) -> str:
    """The served name of the adapter trained up to ``step``."""
    return f"rlab-step-{step}"


class _AdapterNotFound(VLLMError):
    """The server holds no adapter of that name, or none at that path."""


class _ModelNotFound(VLLMError):
    """The server serves no model of the requested name."""


def parse_completion(completion, n_prompts: int) -> list[Sample]:
    """Turn a ``/v1/completions`` answer into one :class:`Sample` per prompt, in prompt order.

    Choices are ordered by their ``index`` (vLLM numbers them prompt by
    prompt). Each choice must carry ``logprobs.tokens`` as ``token_id:<id>``
    strings and ``logprobs.token_logprobs`` of the same length.

    Raises:
        VLLMError: wrong number of choices, missing log-probabilities, or
            tokens not given as ids (a server ignoring
            ``return_tokens_as_token_ids``, i.e. not vLLM or a vLLM older than 0.5).
    """
    try:
        choices = sorted(getattr(completion, "choices", None) or [], key=lambda c: c.index)
        if len(choices) != n_prompts:
            raise VLLMError(f"vLLM answered {len(choices)} choices for {n_prompts} prompts")
        return [_to_sample(c) for c in choices]
    except (TypeError, AttributeError, ValueError) as err:  # fields of the wrong type
        raise VLLMError(f"vLLM's completions answer is malformed: {err}") from err


def _to_sample(choice) -> Sample:
    logprobs = choice.logprobs
    if logprobs is None or logprobs.tokens is None or logprobs.token_logprobs is None:
        raise VLLMError("vLLM answered without token log-probabilities; the request asked for logprobs=1")
    if len(logprobs.tokens) != len(logprobs.token_logprobs) or None in logprobs.token_logprobs:
        raise VLLMError("vLLM answered tokens and log-probabilities of different lengths, or a null logprob")
    ids = []
    for token in logprobs.tokens:
        if not token.startswith(TOKEN_ID_PREFIX):
            raise VLLMError(
                f"vLLM returned token {token!r}, not 'token_id:<id>': the server ignored "
                "return_tokens_as_token_ids; use a vLLM server (>= 0.5) or start it with "
                "--return-tokens-as-token-ids"
            )
        ids.append(int(token[len(TOKEN_ID_PREFIX):]))
    token_logprobs = [float(x) for x in logprobs.token_logprobs]
    return Sample(ids, choice.text, token_logprobs, choice.finish_reason == "length")


def _is_missing_route(err: openai.NotFoundError) -> bool:
    # FastAPI answers an unregistered route with {"detail": "Not Found"}; vLLM's own
    # errors carry a message. The LoRA routes exist only with runtime updating on.
    body = err.body
    return isinstance(body, dict) and body.get("detail") == "Not Found"


def _message(err: openai.APIStatusError) -> str:
    body = err.body
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return err.message


def _wrap(err: Exception, what: str, base_url: str) -> VLLMError:
    if isinstance(err, openai.APIConnectionError):
        return ServerDown(
            f"cannot reach the vLLM server at {base_url} to {what} ({err}); start it with "
            "`rlab serve MODEL --lora` and pass its URL with --vllm-url, or leave --vllm-url out "
            "and rlab starts one"
        )
    status = getattr(err, "status_code", "?")
    kind = ServerDown if isinstance(status, int) and status >= 500 else VLLMError
    return kind(
        f"vLLM failed to {what} (HTTP {status}, after retries): "
        f"{_message(err) if isinstance(err, openai.APIStatusError) else err}; see the server's log"
    )
