"""The policy-gradient update shared by GRPO and GiGPO.

Loss (per completion token t of sample i, advantage A_i, ratio
rho = exp(logp - logp_old)), from PPO (Schulman et al. 2017, eq. 7) as used
by GRPO (Shao et al. 2024, arXiv 2402.03300, eq. 3):

    L = -mean_tokens[ min(rho * A_i, clip(rho, 1 - eps, 1 + eps) * A_i) ]
        + beta * mean_tokens[ k3 ]

with the k3 estimator of KL(pi || pi_ref) (Schulman 2020, "Approximating KL
divergence"): k3 = exp(logp_ref - logp) - (logp_ref - logp) - 1. The mean is
over all trained tokens of the batch (token-level normalisation, as DAPO,
arXiv 2503.14476, section 3.3).

When the samples come from something other than the trained weights (a bf16
or merged sampling copy, a vLLM server), the update corrects for it with
truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training", eq. 3; TRL's
``vllm_importance_sampling_correction``, mode ``token_truncate``): the first
update's forward pass gives the old log-probs pi_old (so the ratio above is
the trained policy's own), and each token's loss is weighted by
w = min(pi_old / pi_sampler, C), pi_sampler from the sampler's stored log-probs.

Tokens whose advantage is exactly 0 carry no policy-gradient signal; when
``beta`` is 0 they are left out of the token mean (and samples with no
other token out of the forward/backward pass entirely: they would add
nothing but cost). So an episode trained as one sequence (its turns' tokens
masked in, observations masked out, each turn with its own advantage) gives
the same per-token loss and the same mean as one sample per turn. That is
DAPO's mean over the groups its dynamic sampling keeps (section 3.2, groups
with reward spread): a step in which one group of eight has spread updates
as strongly as one in which all eight have it. ``loss_tokens="all"``
divides by every trained token of the step instead, zero-advantage ones
included (TRL's ``loss_type="dapo"``, verl's ``token-mean``), so such a
step updates an eighth as much; the zero-advantage samples still skip the
forward pass, which their tokens would add nothing to.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from rlab.engine.run.config import LossTokens, RunConfig
from rlab.engine.policy.device import training_attention
from rlab.engine.policy.lora import is_lora, reference_mode
from rlab.engine.policy.kv import attention_layers, shared_prefix_kv, shared_prefix_length, with_cache
from rlab.engine.train.microbatch import (MicroBatch, by_length, by_prompt_pass, collate_pass, logits_budget,
                                         micro_batches, vocab_size)
from rlab.engine.train.token_logprobs import chosen_logprobs
from rlab.engine.types import TrainSample


def _run_default(name: str) -> Any:
    """RunConfig's default for ``name``: the one place training defaults are set."""
    return RunConfig.model_fields[name].default


@dataclass
class TrainConfig:
    """Optimiser and loss settings (defaults: RunConfig's; built from a run with :meth:`from_run`).

    lr: AdamW learning rate. num_iterations: updates per batch of rollouts
    (mu in GRPO, Shao et al. 2024, Algorithm 1; TRL's ``num_iterations``);
    from the second on, the ratio departs from 1 and clipping acts.
    clip_eps: PPO clip epsilon. beta: KL penalty
    weight (0 disables the reference model). max_grad_norm: gradient clipping
    (L2). temperature: the sampling temperature; log-probabilities are taken
    of logits / temperature so the ratio compares like with like (1.0 when
    used on its own: the raw logits). loss_tokens: the loss's token mean
    runs over the tokens with signal (``with_signal``) or over every
    trained token (``all``); see the module docstring. is_cap: the
    truncated importance-sampling cap C (None: no correction, the ratio's old
    log-probs are the sampler's); with it, the ratio's old log-probs are the
    policy's own from the step's first forward pass (before its optimizer
    step), and each token's loss is weighted by min(pi_old / pi_sampler, C)
    (module docstring).
    """

    lr: float = _run_default("lr")
    num_iterations: int = int(_run_default("num_iterations"))
    clip_eps: float = _run_default("clip_eps")
    beta: float = _run_default("beta")
    max_grad_norm: float = _run_default("max_grad_norm")
    temperature: float = 1.0
    weight_decay: float = 0.0
    loss_tokens: LossTokens = _run_default("loss_tokens")
    is_cap: float | None = None

    @classmethod
    def from_run(cls, config: RunConfig) -> TrainConfig:
        """The trainer settings of a run."""
        return cls(lr=config.lr, num_iterations=config.num_iterations, clip_eps=config.clip_eps,
                   beta=config.beta, max_grad_norm=config.max_grad_norm, temperature=config.temperature,
                   loss_tokens=config.loss_tokens,
                   is_cap=config.importance_sampling_cap if config.importance_sampling_correction else None)


class Trainer:
    """One clipped policy-gradient update per call of :meth:`step`.

    Args:
        model: the policy's ``transformers`` causal LM (trained in place).
        pad_id: the tokenizer's pad token id.
        config: :class:`TrainConfig`.
        autocast: a factory of the context each forward pass runs in (bf16
            autocast on CUDA, see ``engine.policy.device.training_options``).

    The KL reference is the base model with the LoRA adapter disabled when
    the model is a peft model (no second copy), else a frozen deep copy.
    """

    def __init__(self, model, pad_id: int, config: TrainConfig, *, autocast=contextlib.nullcontext):
        self.model = model
        self.pad_id = pad_id
        self.config = config
        self.autocast = autocast
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
        #: The learning rate the next update uses (after the schedule's scale).
        self.learning_rate = config.lr
        self.reference = _frozen_copy(model) if config.beta > 0 and not is_lora(model) else None

    def set_lr_scale(self, scale: float) -> None:
        """Set the learning rate to ``scale`` times the configured one (schedules)."""
        self.learning_rate = self.config.lr * scale
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate

    def step(self, samples: list[TrainSample]) -> dict[str, float]:
        """``num_iterations`` updates on ``samples``; metrics averaged over them.

        The first update's forward pass (before its optimizer step) measures the
        sampler against the trained policy: its ``sampling/*`` metrics are the
        step's, and each forwarded sample's ``policy_logprobs`` are set to it.
        With ``is_cap`` set, it also gives the old log-probs every update's ratio
        divides by, and the importance weights against the sampler (module
        docstring). See :meth:`update` for the others.
        """
        prepared = self._prepare(samples)
        runs = [self._update(prepared, first=k == 0) for k in range(self.config.num_iterations)]
        prepared.hand_back_policy_logprobs()
        averaged = {key: float(np.mean([r[key] for r in runs])) for key in runs[-1]}
        return {**averaged, **{k: v for k, v in runs[0].items() if k.startswith("sampling/")}}

    def update(self, samples: list[TrainSample]) -> dict[str, float]:
        """One update of the policy on ``samples``; return TRL-named metrics.

        Returns a dict with ``loss``, ``kl`` (mean k3 over trained tokens; NaN,
        i.e. not logged, with beta 0: there is no reference, as TRL logs no
        kl then), ``clip_ratio`` (fraction of trained tokens whose
        ratio was clipped in the direction of the advantage), ``entropy``
        (mean token entropy of the policy, nats), ``grad_norm`` (before
        clipping) and ``trained_samples``. With nothing to train (every
        advantage 0 and beta 0) no update is made and the metrics are NaN.
        The batch runs as :func:`micro_batches` whose gradients accumulate
        into one optimizer step: the same update as one pass, in bounded memory.
        """
        return self._update(self._prepare(samples), first=False)

    def _prepare(self, samples: list[TrainSample]) -> _Prepared:
        """The samples an update trains on (those with a nonzero advantage, or all with a
        KL term), collated into micro-batches gathered by prompt pass, and the token counts
        of the loss's mean."""
        active = by_length([s for s in samples if s.has_signal] if self.config.beta == 0 else samples)
        device = next(self.model.parameters()).device
        # The KL term's reference pass would need a shared prefix of its own: with beta > 0 prompts run whole.
        shared = shared_prefix_length([s.prompt_ids for s in active]) if self.config.beta == 0 and not _checkpointed(
            self.model) else 0
        parts = micro_batches(active, vocab_size(self.model), logits_budget(device)) if active else []
        passes = [collate_pass(run, self.pad_id, device, drop_zero_advantage=self.config.beta == 0, skip=shared)
                  for run in by_prompt_pass(parts, skip=shared)]
        chunks = [chunk for run in passes for chunk in run]
        n_tokens = sum(float(chunk.mask.sum()) for chunk in chunks)
        loss_tokens = n_tokens if self.config.loss_tokens == "with_signal" else float(sum(sum(s.mask()) for s in samples))
        widest = max((c.prompt_ids.shape[1] + c.completion_ids.shape[1] for c in chunks), default=0)
        return _Prepared(passes, len(active), n_tokens, loss_tokens, widest, active[0].prompt_ids[:shared] if shared else [],
                         parts)

    def _update(self, prepared: _Prepared, *, first: bool) -> dict[str, float]:
        """One optimizer step over ``prepared``'s micro-batches (gradients accumulated);
        ``first``: the step's first, which measures the sampler (see :meth:`step`)."""
        if not prepared.passes:
            nan = float("nan")
            return {"loss": nan, "kl": nan, "clip_ratio": nan, "entropy": nan, "grad_norm": nan,
                    "trained_samples": 0}
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        totals = dict.fromkeys(("loss", "kl", "clip_ratio", "entropy"), 0.0)
        mismatch = Mismatch()
        models = [self.model] if self.reference is None else [self.model, self.reference]
        device = prepared.passes[0][0].completion_ids.device
        with training_attention(models, device, prepared.widest_tokens + len(prepared.shared_prefix)):
            start = SharedPrefix.run(self.model, prepared.shared_prefix, device, self.autocast) \
                if prepared.shared_prefix else None
            for chunks in prepared.passes:
                prompts = None if _checkpointed(self.model) else self._prompt_pass(self.model, chunks[0], start).cut()
                reference = self._reference_prompts(chunks[0])
                for chunk in chunks:
                    sums = self._token_sums(chunk, prompts, reference, first=first, mismatch=mismatch)
                    (sums["loss"] / prepared.loss_tokens).backward()  # gradient accumulation: the mean over the batch
                    for key in totals:
                        totals[key] += sums[key].item()
                if prompts is not None:
                    prompts.backward()
            if start is not None:
                start.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.model.parameters() if p.requires_grad], self.config.max_grad_norm
        )
        self.optimizer.step()
        metrics = {key: value / prepared.n_tokens for key, value in totals.items()}
        metrics["loss"] = totals["loss"] / prepared.loss_tokens
        if self.config.beta == 0:
            metrics["kl"] = float("nan")  # no reference model: a flat 0 would be a measurement it is not
        return {**metrics, "grad_norm": float(grad_norm) if math.isfinite(float(grad_norm)) else float("nan"),
                "trained_samples": prepared.samples, **mismatch.metrics()}

    def _token_sums(self, batch: MicroBatch, prompts: PromptPass | None = None, reference: PromptPass | None = None,
                    *, first: bool = False, mismatch: Mismatch | None = None) -> dict[str, torch.Tensor]:
        """Sums over the trained tokens of one micro-batch: ``loss`` (with its
        graph: clipped surrogate, each token weighted by its importance weight,
        plus beta * k3), and, detached, ``kl``, ``clip_ratio`` (clipped tokens)
        and ``entropy``. ``first``: this pass's log-probs are the batch's policy
        log-probs, measured against the sampler's (``mismatch`` gathers the
        statistics); with ``is_cap`` they become its old ones (the ratio is then
        1) and give the importance weights (``is_weights``, kept for the later
        updates). ``prompts``, ``reference``: the batch's prompt pass through the
        policy and through the KL reference (None: run here)."""
        logp, entropy = self._token_logprobs(self.model, batch, prompts)
        mask = batch.mask
        if first:
            diff = batch.take_policy_logprobs(logp, self.config.is_cap)
            if mismatch is not None:
                mismatch.add(diff, batch.is_weights, mask)
        ratio = torch.exp(logp - batch.old_logprobs)
        adv = batch.advantages
        clipped = torch.clamp(ratio, 1 - self.config.clip_eps, 1 + self.config.clip_eps)
        weights = batch.is_weights
        surrogate = torch.minimum(ratio * adv, clipped * adv) * (weights if weights is not None else 1.0)
        loss = -(surrogate * mask).sum()
        kl = self._kl(batch, logp, reference)
        if self.config.beta > 0:
            loss = loss + self.config.beta * (kl * mask).sum()
        was_clipped = ((ratio < 1 - self.config.clip_eps) & (adv < 0)) | (
            (ratio > 1 + self.config.clip_eps) & (adv > 0)
        )
        return {"loss": loss, "kl": (kl * mask).sum().detach(), "clip_ratio": (was_clipped.float() * mask).sum(),
                "entropy": (entropy * mask).sum()}

    def _kl(self, batch: MicroBatch, logp: torch.Tensor, reference: PromptPass | None = None) -> torch.Tensor:
        if self.config.beta == 0:
            return torch.zeros_like(logp)
        with torch.no_grad(), self._as_reference() as model:
            ref_logp, _ = self._token_logprobs(model, batch, reference)
        delta = ref_logp - logp
        return torch.exp(delta) - delta - 1

    @contextlib.contextmanager
    def _as_reference(self):
        """The KL reference model within the block: the frozen copy, or the policy with its adapter off."""
        if self.reference is not None:
            yield self.reference
        else:
            with reference_mode(self.model):
                yield self.model

    def _prompt_pass(self, model, batch: MicroBatch, start: SharedPrefix | None = None) -> PromptPass:
        with self.autocast():
            return PromptPass.run(model, batch, start)

    def _reference_prompts(self, batch: MicroBatch) -> PromptPass | None:
        """The KL reference's prompt pass of ``batch``'s prompts (no gradient); None without a KL term."""
        if self.config.beta == 0 or _checkpointed(self.model):
            return None
        with torch.no_grad(), self._as_reference() as model:
            return self._prompt_pass(model, batch)

    def _token_logprobs(self, model, batch: MicroBatch, prompts: PromptPass | None = None):
        """Log-probs (B, T) float32 of the completion tokens, and their entropies (B, T).

        ``prompts``: the pass of the batch's prompts through ``model`` (None: run here).
        Memory: only the logits as the model returns them (bf16 under
        autocast) are kept for the backward pass; log-probs, their gradient
        and the entropies are computed in chunks (``engine.train.token_logprobs``),
        never as a whole (B, T, V) float32 copy.
        """
        ids, temperature = batch.completion_ids, self.config.temperature
        with self.autocast():
            if _checkpointed(model):
                return chosen_logprobs(_checkpointed_logits(model, batch), ids, temperature)
            first, tail = _completion_logits(model, batch, prompts or PromptPass.run(model, batch))
        # the first token's and the rest's separately: no copy of the (B, W, V) logits into one tensor
        parts = [chosen_logprobs(first, ids[:, :1], temperature)]
        if tail is not None:
            parts.append(chosen_logprobs(tail, ids[:, 1:], temperature))
        return torch.cat([logp for logp, _ in parts], dim=1), torch.cat([entropy for _, entropy in parts], dim=1)


@dataclass
class _Prepared:
    """A step's batch as its updates run it: the micro-batches
    (``engine.train.microbatch.collate_pass``), gathered by prompt pass (``passes``), and
    the samples of each (``parts``, in the same order), how many samples they hold, the
    trained tokens (``n_tokens``), the loss's denominator, the widest micro-batch's prompt
    and completion width in tokens (``widest_tokens``), and the prefix every prompt shares
    (:func:`~rlab.engine.policy.kv.shared_prefix_length`), which the micro-batches' prompts
    are collated without (``shared_prefix``; empty: none)."""

    passes: list[list[MicroBatch]]
    samples: int
    n_tokens: float
    loss_tokens: float
    widest_tokens: int
    shared_prefix: list[int]
    parts: list[list[TrainSample]]

    @property
    def chunks(self) -> list[MicroBatch]:
        """Every micro-batch, in order."""
        return [chunk for chunks in self.passes for chunk in chunks]

    def hand_back_policy_logprobs(self) -> None:
        """Each forwarded sample's ``policy_logprobs``: its row of the policy log-probs the
        first update measured (:meth:`MicroBatch.take_policy_logprobs`), as long as its completion."""
        for chunk, part in zip(self.chunks, self.parts):
            assert chunk.policy_logprobs is not None  # Trainer.step's first update measured every chunk
            for row, sample in zip(chunk.policy_logprobs.tolist(), part):
                sample.policy_logprobs = row[:len(sample.completion_ids)]


class GradientCut:
    """Tensors one forward pass made, cut from its graph: later passes read the leaves
    (:attr:`leaves`, float32, requiring gradients where the made tensor does), whose
    gradients gather over any number of backward passes; :meth:`backward` then carries
    their sum through the pass that made them, once. By linearity that is the gradient of
    running the pass inside every later one, with its graph kept meanwhile. The leaves are
    float32 (a bf16 value converts exactly), so the sum is not rounded to bf16 at every
    addition; :meth:`read` gives each in its made dtype.
    """

    def __init__(self, made: list[torch.Tensor]):
        self._made = made
        self.leaves = [t.detach().float().requires_grad_(t.requires_grad) for t in made]

    def read(self) -> list[torch.Tensor]:
        """The leaves, each in the dtype of the tensor it was cut from."""
        return [leaf.to(made.dtype) for leaf, made in zip(self.leaves, self._made)]

    def backward(self) -> None:
        """Send the gradients gathered on the leaves into the pass that made them."""
        pairs = [(made, leaf.grad) for made, leaf in zip(self._made, self.leaves) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([made for made, _ in pairs], [grad.to(made.dtype) for made, grad in pairs])


class SharedPrefix:
    """The prefix every trained prompt of an update shares (a task's system prompt and
    chat template: arithmetic's 39 of 50 tokens), run once per update instead of once
    per prompt pass.

    Its keys and values, (1, kv_heads, n, head_dim) per layer, enter each prompt pass
    as :class:`GradientCut` leaves; :meth:`backward` carries their gradients through
    the prefix's own pass, with the graph of one pass over n tokens kept meanwhile.
    """

    def __init__(self, ids: list[int], made: list[torch.Tensor]):
        self.ids = ids
        self._cut = GradientCut(made)

    @classmethod
    def run(cls, model, ids: list[int], device, autocast) -> SharedPrefix:
        """Run ``ids`` (n tokens, positions 0..n-1) through ``model`` with gradients, under ``autocast``."""
        with autocast():
            layers = shared_prefix_kv(model, ids, device)
        return cls(ids, [t for keys_values in layers for t in keys_values])

    def cache(self, rows: int) -> DynamicCache:
        """A KV cache holding the prefix for ``rows`` rows (views of the leaves)."""
        return _cache([t.expand(rows, -1, -1, -1) for t in self._cut.read()])

    def backward(self) -> None:
        """Send the gradients the prompt passes left on the leaves into the prefix's own pass."""
        self._cut.backward()


class PromptPass:
    """The D distinct prompts of one or more micro-batches (``microbatch.by_prompt_pass``),
    run through the model once: each layer's keys and values, (D, kv_heads, L, head_dim)
    (the shared prefix's and the prompt's), and each prompt's last logits (D, V), which
    predict its first completion token.

    A micro-batch's rows read them by prompt (:meth:`rows`); the gradient of every row
    flows back to its prompt. Cut (:meth:`cut`), the pass's keys, values and logits are
    :class:`GradientCut` leaves, so several micro-batches' backward passes share one
    pass over the prompts; :meth:`backward` then carries their gradients into it.
    """

    def __init__(self, tensors: list[torch.Tensor], mask: torch.Tensor, cut: GradientCut | None = None):
        self._tensors = tensors
        self.mask = mask
        self._cut = cut

    @classmethod
    def run(cls, model, batch: MicroBatch, start: SharedPrefix | None = None) -> PromptPass:
        """Run ``batch``'s distinct prompts through ``model`` (over ``start``'s cache, when
        they were collated without the shared prefix), under the caller's autocast and grad mode."""
        mask = batch.prompt_mask
        if start is not None:
            mask = torch.cat([mask.new_ones((mask.shape[0], len(start.ids))), mask], dim=1)
        cache = start.cache(mask.shape[0]) if start is not None else DynamicCache()
        head = model(input_ids=batch.prompt_ids, attention_mask=mask, position_ids=batch.prompt_positions,
                     **with_cache(model, cache), use_cache=True, logits_to_keep=1)
        keys_values = [t for layer in attention_layers(cache) for t in (layer.keys, layer.values)]
        return cls([*keys_values, head.logits[:, -1]], mask)

    def cut(self) -> PromptPass:
        """This pass with its tensors as :class:`GradientCut` leaves (see :meth:`backward`)."""
        cut = GradientCut(self._tensors)
        return PromptPass(cut.read(), self.mask, cut)

    def rows(self, prompt_of_row: torch.Tensor) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
        """For rows of the prompts ``prompt_of_row`` (B,): a KV cache (a copy per row), the
        logits of their first completion token (B, 1, V), and their prompts' mask (B, L)."""
        *keys_values, last = self._tensors
        return (_cache([t.index_select(0, prompt_of_row) for t in keys_values]),
                last.index_select(0, prompt_of_row).unsqueeze(1), self.mask[prompt_of_row])

    def backward(self) -> None:
        """Send the gradients the micro-batches left on a cut pass into the pass itself."""
        assert self._cut is not None, "only a cut prompt pass gathers gradients"
        self._cut.backward()


def _cache(keys_values: list[torch.Tensor]) -> DynamicCache:
    """A KV cache of each layer's keys and values, given in turn."""
    cache = DynamicCache()
    for layer in range(len(keys_values) // 2):
        cache.update(keys_values[2 * layer], keys_values[2 * layer + 1], layer)
    return cache


class Mismatch:
    """The sampler-trainer mismatch of one update's trained tokens, gathered over its micro-batches.

    ``sampling/sampling_logp_difference/{mean,max}``: |log pi_old - log pi_sampler| (nats);
    ``sampling/importance_sampling_ratio/{min,mean,max}``: the truncated weights
    min(pi_old / pi_sampler, C), when the correction applies them. TRL's names and
    definitions (its token_truncate mode).
    """

    def __init__(self) -> None:
        self.tokens, self.diff_sum, self.diff_max = 0.0, 0.0, 0.0
        self.w_sum, self.w_min, self.w_max = 0.0, math.inf, -math.inf

    def add(self, diff: torch.Tensor, weights: torch.Tensor | None, mask: torch.Tensor) -> None:
        """One micro-batch: its (rows, tokens) log-prob differences, weights (None: the
        correction is off) and 0/1 mask."""
        trained = mask > 0
        if not bool(trained.any()):
            return
        d = diff[trained].abs().float()
        self.tokens += float(trained.sum())
        self.diff_sum += float(d.sum())
        self.diff_max = max(self.diff_max, float(d.max()))
        if weights is None:
            return
        w = weights[trained].float()
        self.w_sum += float(w.sum())
        self.w_min, self.w_max = min(self.w_min, float(w.min())), max(self.w_max, float(w.max()))

    def metrics(self) -> dict[str, float]:
        """The five metrics (none before a token was added; the two differences only
        when no weights were)."""
        if not self.tokens:
            return {}
        differences = {"sampling/sampling_logp_difference/mean": self.diff_sum / self.tokens,
                       "sampling/sampling_logp_difference/max": self.diff_max}
        if self.w_min == math.inf:
            return differences
        return {**differences, "sampling/importance_sampling_ratio/min": self.w_min,
                "sampling/importance_sampling_ratio/mean": self.w_sum / self.tokens,
                "sampling/importance_sampling_ratio/max": self.w_max}


def _checkpointed(model) -> bool:
    """Whether ``model`` runs gradient checkpointing (whose layers keep no KV cache)."""
    return any(getattr(module, "gradient_checkpointing", False) for module in model.modules())


def _frozen_copy(model):
    reference = copy.deepcopy(model).eval()
    for param in reference.parameters():
        param.requires_grad_(False)
    return reference


def _checkpointed_logits(model, batch: MicroBatch) -> torch.Tensor:
    """Logits (B, W, V) at the positions that predict each row's W completion tokens, from one
    pass over prompt and completion per row: checkpointed layers keep no KV cache."""
    rows, width = batch.prompt_of_row, batch.completion_ids.shape[1]
    attention = torch.cat([batch.prompt_mask[rows], batch.completion_mask], dim=1)
    return model(input_ids=torch.cat([batch.prompt_ids[rows], batch.completion_ids], dim=1),
                 attention_mask=attention, position_ids=(attention.cumsum(dim=1) - 1).clamp(min=0),
                 logits_to_keep=width + 1).logits[:, :-1]


def _completion_logits(model, batch: MicroBatch, prompts: PromptPass) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits at the positions that predict each row's W completion tokens: the first's
    (B, 1, V), from its prompt's pass, and the others' (B, W - 1, V) (None when W is 1).

    The G samples of a group share their prompt, so each distinct prompt runs
    through the model once (``prompts``) and its KV cache is copied to its rows
    (an index_select, through which the gradient of every row flows back to the
    prompt); then the completions run over that cache. The loss and gradients
    equal those of one pass per row, for a fraction of the compute (arithmetic:
    8 prompts x 11 tokens past the shared prefix and 64 x 14 completion tokens,
    instead of 64 x 64).
    """
    width = batch.completion_ids.shape[1]
    cache, first, prompt_mask = prompts.rows(batch.prompt_of_row)
    if width == 1:
        return first, None
    after_prompt = batch.prompt_positions[batch.prompt_of_row, -1:] + 1
    tail = model(input_ids=batch.completion_ids[:, :-1],
                 attention_mask=torch.cat([prompt_mask, batch.completion_mask[:, :-1]], dim=1),
                 position_ids=after_prompt + torch.arange(width - 1, device=after_prompt.device),
                 **with_cache(model, cache), use_cache=True).logits
    return first, tail
