"""Continuous batching: requests join the decoding batch when they arrive and leave when done.

The engine's own rollouts know every prompt of a turn up front, so
``engine.policy.sampling`` decodes them as one batch. A user's agent
(``engine.agent``) sends its requests one by one, each agent at its own turn,
so a :class:`ContinuousBatcher` runs one loop on its own thread: each
iteration it prefills the requests that arrived since the last one (their
longest kept prefix reused, as in ``sampling``), merges their KV rows into
the running batch (left-padded to one width), picks one token for every row,
retires the rows that ended (EOS, a stop string, their token budget) and
runs one forward pass of the rest. A request never waits for a batch to
finish: at most for the one decoding step in flight (Orca, Yu et al.,
OSDI 2022, "iteration-level scheduling").

A retired row's KV is kept (a :class:`~rlab.engine.policy.kv.PrefixCache`
for the batcher's life), so an agent's next turn, which re-sends the
conversation, prefills only what it added. Requests that share a prefix
(a group's rollouts) share its prefill.

Each row samples with its own temperature and nucleus (``top_p``) and, given
a ``seed``, its own generator. The log-probabilities returned are those of
the distribution the token was drawn from (temperature applied, the nucleus
renormalised; greedy: temperature 1), which the trainer's importance weights
correct for (``engine.train.trainer``).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from rlab.engine.policy.kv import PrefixCache, attention_layers, with_cache
from rlab.engine.policy.sampling import _inverse_cdf, _keep_rows, _prefill
from rlab.engine.types import Sample


class SamplerStopped(RuntimeError):
    """The batcher closed with the request unfinished (its step ended)."""


@dataclass(frozen=True)
class GenerationRequest:
    """One chat completion's sampling: ``n`` completions of ``prompt_ids``.

    prompt_ids: the rendered conversation (tokens). max_new_tokens: tokens at
    most per completion. temperature: <= 0 is greedy. top_p: nucleus mass in
    (0, 1]. stop: strings that end a completion (not part of its text).
    seed: draws from a generator of this seed instead of torch's global one.
    """

    prompt_ids: list[int]
    n: int = 1
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass
class BatcherStats:
    """What the batcher did, for the step's metrics (``engine.agent.endpoint``).

    requests: requests finished. decode_steps: forward passes of one token per
    row. row_steps: rows over those passes (mean batch width = row_steps /
    decode_steps). queue_wait_s: seconds requests waited from arrival to
    their prefill, summed. tokens: completion tokens sampled. busy_s: seconds
    the loop spent prefilling and decoding.
    """

    requests: int = 0
    decode_steps: int = 0
    row_steps: int = 0
    queue_wait_s: float = 0.0
    tokens: int = 0
    busy_s: float = 0.0


@dataclass
class _Pending:
    request: GenerationRequest
    future: Future[list[Sample]]
    arrived: float
    samples: list[Sample | None] = field(default_factory=list)


@dataclass
class _Row:
    pending: _Pending
    choice: int
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class ContinuousBatcher:
    """One decoding loop on its own thread, fed by :meth:`submit` from any thread.

    Args:
        model: the ``transformers`` causal LM to sample with (held for the
            batcher's life: the weights must not change under its kept KV).
        tokenizer: decodes completions (and checks stop strings).
        pad_id, eos_id: the tokenizer's pad and end ids.
        device: where the model lives.
        threads: torch's intra-op threads for the loop's thread (None: torch's).
    """

    def __init__(self, model, tokenizer, *, pad_id: int, eos_id: int, device, threads: int | None = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.pad_id, self.eos_id, self.device = pad_id, eos_id, device
        self.stats = BatcherStats()
        self.cache = PrefixCache()
        self._threads = threads
        self._inbox: queue.Queue[_Pending | None] = queue.Queue()
        self._rows: list[_Row] = []
        self._kv = DynamicCache()
        self._mask = torch.zeros((0, 0), dtype=torch.long, device=device)
        self._next_pos = torch.zeros(0, dtype=torch.long, device=device)
        self._logits = torch.zeros((0, 0), device=device)
        self._thread = threading.Thread(target=self._loop, name="rlab-batcher", daemon=True)
        self._thread.start()

    @staticmethod
    def refuses(request: GenerationRequest) -> str | None:
        """Why ``request`` cannot be served (never: this loop honours every field)."""
        return None

    def submit(self, request: GenerationRequest) -> Future[list[Sample]]:
        """Queue ``request``; the future holds its ``n`` samples in choice order, or the
        exception decoding raised (e.g. a prompt past the model's context)."""
        pending = _Pending(request, Future(), time.monotonic(), [None] * request.n)
        self._inbox.put(pending)
        return pending.future

    def close(self) -> None:
        """Stop the loop after the step in flight; unfinished requests get :class:`SamplerStopped`."""
        self._inbox.put(None)
        self._thread.join()

    def _loop(self) -> None:
        if self._threads:
            torch.set_num_threads(self._threads)
        with torch.no_grad():
            while True:
                arrived = self._arrivals()
                if arrived is None:
                    break
                start = time.monotonic()
                try:
                    if arrived:
                        self._admit(arrived)
                    if self._rows:
                        self._step()
                except Exception as err:  # a bad request's failure fails what is in the batch, not the loop
                    self._fail_all(arrived, err)
                self.stats.busy_s += time.monotonic() - start
        self._fail_all([], SamplerStopped("the endpoint's sampler stopped: the step ended"))

    def _arrivals(self) -> list[_Pending] | None:
        """The requests that arrived (waiting for one when nothing decodes); None: close."""
        arrived: list[_Pending] = []
        try:
            item = self._inbox.get(block=not self._rows)
            while True:
                if item is None:
                    return None
                arrived.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            return arrived

    def _admit(self, arrived: list[_Pending]) -> None:
        now = time.monotonic()
        self.stats.queue_wait_s += sum(now - p.arrived for p in arrived)
        prompts = list(dict.fromkeys(tuple(p.request.prompt_ids) for p in arrived))
        kv, logits, mask, last_pos = _prefill(self.model, [list(p) for p in prompts], self.cache,
                                              self.pad_id, self.device)
        index = {prompt: i for i, prompt in enumerate(prompts)}
        rows = [_Row(p, c, _generator(p.request.seed, c)) for p in arrived for c in range(p.request.n)]
        select = torch.tensor([index[tuple(r.pending.request.prompt_ids)] for r in rows], device=self.device)
        kv.batch_select_indices(select)
        self._merge(kv, mask[select], last_pos[select] + 1, logits[select], rows)

    def _merge(self, kv: DynamicCache, mask: torch.Tensor, next_pos: torch.Tensor, logits: torch.Tensor,
               rows: list[_Row]) -> None:
        """Append rows to the running batch; both are right-aligned, so left padding keeps them so."""
        if not self._rows:
            self._kv, self._mask, self._next_pos, self._logits, self._rows = kv, mask, next_pos, logits, rows
            return
        width = max(self._mask.shape[1], mask.shape[1])
        for mine, theirs in zip(attention_layers(self._kv), attention_layers(kv)):
            mine.keys = torch.cat([_left(mine.keys, width, 2), _left(theirs.keys, width, 2)])
            mine.values = torch.cat([_left(mine.values, width, 2), _left(theirs.values, width, 2)])
        self._mask = torch.cat([_left(self._mask, width, 1), _left(mask, width, 1)])
        self._next_pos = torch.cat([self._next_pos, next_pos])
        self._logits = torch.cat([self._logits, logits])
        self._rows += rows

    def _step(self) -> None:
        """Pick a token for every row, retire the rows that ended, decode the rest one token."""
        token, logprob = _pick_rows(self._logits, self._rows)
        ended = []
        for i, (row, tok, lp) in enumerate(zip(self._rows, token.tolist(), logprob.tolist())):
            row.tokens.append(tok)
            row.logprobs.append(lp)
            if tok == self.eos_id or len(row.tokens) >= row.pending.request.max_new_tokens or self._stopped(row):
                ended.append(i)
        self.stats.tokens += len(self._rows)
        if ended:
            self._retire(ended)
        if not self._rows:
            return
        self.stats.decode_steps += 1
        self.stats.row_steps += len(self._rows)
        self._mask = torch.cat([self._mask, self._mask.new_ones((len(self._rows), 1))], dim=1)
        out = self.model(input_ids=self._last_tokens(),
                         attention_mask=self._mask, position_ids=self._next_pos.unsqueeze(1),
                         **with_cache(self.model, self._kv), use_cache=True)
        self._logits, self._next_pos = out.logits[:, -1], self._next_pos + 1

    def _last_tokens(self) -> torch.Tensor:
        return torch.tensor([[row.tokens[-1]] for row in self._rows], device=self.device)

    def _stopped(self, row: _Row) -> bool:
        stop = row.pending.request.stop
        return bool(stop) and any(s in self._text(row.tokens) for s in stop)

    def _retire(self, ended: list[int]) -> None:
        contexts = [self._rows[i].pending.request.prompt_ids + self._rows[i].tokens[:-1] for i in ended]
        _keep_rows(self.cache, self._kv, self._mask, ended, contexts)
        for i in ended:
            self._finish(self._rows[i])
        keep = [i for i in range(len(self._rows)) if i not in set(ended)]
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            return
        index = torch.tensor(keep, device=self.device)
        self._kv.batch_select_indices(index)
        self._mask, self._next_pos, self._logits = self._mask[index], self._next_pos[index], self._logits[index]
        width = int(self._mask.sum(dim=1).max())  # rows stay right-aligned: cut the columns none uses
        if width < self._mask.shape[1]:
            for layer in attention_layers(self._kv):
                layer.keys, layer.values = layer.keys[:, :, -width:], layer.values[:, :, -width:]
            self._mask = self._mask[:, -width:]

    def _finish(self, row: _Row) -> None:
        pending, tokens = row.pending, row.tokens
        text = self._text(tokens)
        cut = min((text.index(s) for s in pending.request.stop if s in text), default=None)
        ended = tokens[-1] == self.eos_id or cut is not None
        pending.samples[row.choice] = Sample(tokens, text if cut is None else text[:cut], row.logprobs, not ended)
        if all(s is not None for s in pending.samples):
            self.stats.requests += 1
            pending.future.set_result([s for s in pending.samples if s is not None])

    def _text(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True))

    def _fail_all(self, arrived: list[_Pending], err: Exception) -> None:
        """Fail every request in the batch (and ``arrived``) and empty it."""
        failed = {id(r.pending): r.pending for r in self._rows}
        failed.update({id(p): p for p in arrived})
        for pending in failed.values():
            if not pending.future.done():
                pending.future.set_exception(err)
        self._rows = []
        self._kv = DynamicCache()


def _generator(seed: int | None, choice: int) -> torch.Generator | None:
    """A seeded request's own generator (its i-th choice: seed + i), so its draws do not
    depend on what else is in the batch."""
    if seed is None:
        return None
    return torch.Generator().manual_seed(seed + choice)


def _left(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """``tensor`` left-padded with zeros along ``dim`` to ``width``."""
    missing = width - tensor.shape[dim]
    if not missing:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - dim) + [missing, 0]
    return F.pad(tensor, pad)


def _pick_rows(logits: torch.Tensor, rows: list[_Row]) -> tuple[torch.Tensor, torch.Tensor]:
    """Next token (R,) long and its log-probability (R,) float32 per row, each row with its
    request's temperature, nucleus and generator (``sampling._pick`` for one temperature)."""
    temps = torch.tensor([r.pending.request.temperature for r in rows], device=logits.device)
    greedy = temps <= 0
    logp = torch.log_softmax(logits.float() / torch.where(greedy, 1.0, temps)[:, None], dim=-1)
    for i, row in enumerate(rows):
        if row.pending.request.top_p < 1 and not bool(greedy[i]):
            logp[i] = _nucleus(logp[i], row.pending.request.top_p)
    uniform = torch.rand((len(rows), 1), device=logits.device)
    for i, row in enumerate(rows):
        if row.generator is not None:
            uniform[i] = torch.rand(1, generator=row.generator)
    token = torch.where(greedy, logp.argmax(dim=-1), _inverse_cdf(logp.exp(), uniform))
    return token, logp.gather(1, token.unsqueeze(1)).squeeze(1)


def _nucleus(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logp`` (V,) cut to the smallest set of top tokens whose mass reaches ``top_p``,
    renormalised (Holtzman et al., ICLR 2020, section 3.1); the rest -inf."""
    sorted_logp, order = logp.sort(descending=True)
    before = sorted_logp.exp().cumsum(0) - sorted_logp.exp()
    cut = torch.full_like(logp, float("-inf"))
    kept = order[before < top_p]
    cut[kept] = logp[kept]
    return torch.log_softmax(cut, dim=0)
