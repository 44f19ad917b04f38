"""A step's samples as the trainer runs them: cut into micro-batches, each collated into tensors.

:func:`by_length` orders the samples, :func:`micro_batches` cuts them to a
logits budget and a padding share, :func:`collate` makes one
:class:`MicroBatch` of each; ``engine.train.trainer`` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlab.engine.policy.kv import left_pad
from rlab.engine.types import TrainSample

#: Bytes of one float32 (rows, tokens, vocabulary) logits tensor per micro-batch. SmolLM2's
#: 49,152-token vocabulary makes a 64 x 64-token batch 0.8 GB per copy, and the forward and
#: backward passes hold several, plus the layers' activations, which grow with the same
#: token count. Measured (tests/bench/real_model.py, SmolLM2, 64 sequences, LoRA): peak RSS
#: 6.36 GB in one pass, 4.38 GB at 256 MiB, 2.22 GB at 64 MiB, with the update no slower
#: (15.3, 14.3, 13.7 s). The tiny policy's batches never reach it.
LOGITS_BUDGET_BYTES = 64 * 2**20
#: On CUDA the budget is this share of the device's free memory (at least the CPU's): an
#: H100's 70+ GB take a whole GRPO batch of a small model in one pass (unless its padding
#: would dominate: :data:`MAX_PADDING_SHARE`), where the CPU's
#: 64 MiB cut SmolLM2's 64 sequences into ~20 micro-batches (about 3 each).
CUDA_FREE_SHARE = 1 / 8


def logits_budget(device: torch.device) -> int:
    """Bytes of float32 logits per micro-batch on ``device`` (see :func:`micro_batches`):
    :data:`LOGITS_BUDGET_BYTES` on CPU, :data:`CUDA_FREE_SHARE` of the free memory on CUDA."""
    if device.type != "cuda":
        return LOGITS_BUDGET_BYTES
    free, _ = torch.cuda.mem_get_info(device)
    return max(LOGITS_BUDGET_BYTES, int(free * CUDA_FREE_SHARE))


def vocab_size(model) -> int:
    """Rows of the model's output layer (V, the width of its logits)."""
    return int(model.get_output_embeddings().weight.shape[0])


#: A micro-batch is cut before its padding would pass this share of its tokens (rows x
#: (widest prompt + widest completion)) and :data:`MIN_PADDING_TOKENS`. Episodes of one
#: step differ in length (an 8 x 8 lake's walks: 150 to 1,800 tokens), and a padded row
#: still pays for its whole width in attention. Measured (tests/bench/padding.py, 24
#: episodes of 420-1,920 tokens, the tiny policy, one thread): 14.3 s an update in one
#: pass, 8.9 s cut at a share of 0.2 (1.6x; docs/results/padding.json), the same loss.
MAX_PADDING_SHARE = 0.2
#: Padding below this many tokens never cuts: a batch of short completions (arithmetic's
#: 256 rows of some 16 tokens) costs less padded than as many small passes.
MIN_PADDING_TOKENS = 1024


def micro_batches(samples: list[TrainSample], vocab: int,
                  budget_bytes: int) -> list[list[TrainSample]]:
    """``samples`` cut, in order, into runs whose float32 logits (rows x widest
    completion x ``vocab`` x 4 bytes) fit ``budget_bytes`` and whose padding stays
    within :data:`MAX_PADDING_SHARE` of their tokens (or :data:`MIN_PADDING_TOKENS`,
    whichever is more); a sample over the budget on its own is a micro-batch by
    itself. In :func:`by_length`'s order a micro-batch's completions have similar widths.
    """
    chunks: list[list[TrainSample]] = [[]]
    prompt_width = widest = real = 0
    for sample in samples:
        prompt, completion = len(sample.prompt_ids), len(sample.completion_ids)
        rows, wider, wider_prompt = len(chunks[-1]) + 1, max(widest, completion), max(prompt_width, prompt)
        over_budget = rows * wider * vocab * 4 > budget_bytes
        area = rows * (wider_prompt + wider)
        padding = area - (real + prompt + completion)
        if chunks[-1] and (over_budget or padding > max(MAX_PADDING_SHARE * area, MIN_PADDING_TOKENS)):
            chunks.append([])
            wider, wider_prompt, real = completion, prompt, 0
        chunks[-1].append(sample)
        widest, prompt_width, real = wider, wider_prompt, real + prompt + completion
    return chunks


def by_length(samples: list[TrainSample]) -> list[TrainSample]:
    """``samples`` ordered by completion length (samples of one prompt adjacent among
    equal lengths), so a micro-batch pads its completions to its neighbours' width.

    Not group by group: a group with one completion cut at the token budget
    padded all its rows to it (arithmetic: nearly every group of a step has
    one, so 40 rows of 2-24 tokens ran as 40 x 24). The price is a group's rows
    spread over several micro-batches: the prefix all prompts share runs once an
    update (``engine.train.trainer.SharedPrefix``) and each distinct prompt once for
    the micro-batches of its prompt pass (:func:`by_prompt_pass`). Measured on SmolLM2
    (one arithmetic step, 40 trained rows, 2 threads): 4.58 s grouped, 3.32 s in this
    order with the shared prefix, the same loss.
    """
    return sorted(samples, key=lambda s: (len(s.completion_ids), tuple(s.prompt_ids)))


@dataclass
class MicroBatch:
    """One micro-batch of B samples (rows), on one device, and the D distinct prompts of its
    prompt pass (:func:`by_prompt_pass`: the same tensors for every micro-batch of that pass).

    prompt_ids, prompt_mask, prompt_positions: (D, Lp) long, the distinct
    prompts left-padded (positions count real tokens only, as generate()
    does, from the shared prefix's length they were collated without).
    prompt_of_row: (B,) long, each row's prompt (an index into the D). completion_ids,
    completion_mask: (B, W) long, completions right-padded. mask: (B, W)
    float32, each row's loss mask. advantages: (B, W) float32 per token.
    old_logprobs: (B, W) float32 log-probs (nats) the ratio is taken against:
    the sampler's, until :meth:`take_policy_logprobs`. is_weights: (B, W)
    float32 truncated importance weights, None until then (no correction).
    policy_logprobs: (B, W) float32, the trained policy's log-probs at the
    step's first forward pass, None until :meth:`take_policy_logprobs`.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    prompt_positions: torch.Tensor
    prompt_of_row: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    old_logprobs: torch.Tensor
    is_weights: torch.Tensor | None = None
    policy_logprobs: torch.Tensor | None = None

    def take_policy_logprobs(self, logp: torch.Tensor, cap: float | None) -> torch.Tensor:
        """Measure the sampler against ``logp`` (B, W), the trained policy's own log-probs
        at the step's first forward pass: returns log pi_old - log pi_sampler (B, W), 0
        off the mask. With ``cap``, ``logp`` becomes the old log-probs and each token is
        weighed by min(pi_old / pi_sampler, ``cap``): truncated importance sampling (Yao
        et al. 2025, eq. 3); without, the ratio stays the sampler's (measured, not
        corrected). Either way ``logp`` is kept as :attr:`policy_logprobs`."""
        self.policy_logprobs = logp.detach()
        diff = (self.policy_logprobs - self.old_logprobs) * self.mask
        if cap is not None:
            self.is_weights = torch.clamp(torch.exp(diff), max=cap)
            self.old_logprobs = self.policy_logprobs
        return diff


def by_prompt_pass(parts: list[list[TrainSample]], *, skip: int = 0) -> list[list[list[TrainSample]]]:
    """``parts`` (micro-batches, in order) gathered into runs whose distinct prompts, less
    their first ``skip`` tokens (the shared prefix), hold no more tokens than the distinct
    prompts of the largest part alone.

    Each run's prompts go through the model in one forward pass whose keys and values
    serve all its micro-batches (``engine.train.trainer.PromptPass``), its graph kept
    until their backward passes are done: bounded so, it holds no more than one
    micro-batch's own prompt pass would. In :func:`by_length`'s order a group's rows
    spread over several micro-batches, so with a prompt pass each, every prompt ran once
    per micro-batch it has rows in: measured on SmolLM2 (arithmetic, 64 rows in 4
    micro-batches, AVX2 float32, 2 threads), 24 prompt rows for 8 prompts and two more
    model calls per micro-batch, each reading every weight.
    """
    own = [{tuple(s.prompt_ids) for s in part} for part in parts]
    tokens = lambda prompts: sum(len(p) - skip for p in prompts)  # noqa: E731
    budget = max(map(tokens, own), default=0)
    runs: list[list[list[TrainSample]]] = []
    seen: set[tuple[int, ...]] = set()
    for part, prompts in zip(parts, own):
        if not runs or tokens(seen | prompts) > budget:
            runs.append([])
            seen = set()
        runs[-1].append(part)
        seen |= prompts
    return runs


def collate_pass(parts: list[list[TrainSample]], pad_id: int, device, *, drop_zero_advantage: bool = False,
                 skip: int = 0) -> list[MicroBatch]:
    """One :class:`MicroBatch` per part of a prompt pass: the parts' distinct prompts
    collated once (without their first ``skip`` tokens, a shared prefix's) and shared by
    all; completions per row; the loss mask without zero-advantage tokens when
    ``drop_zero_advantage``; old log-probs the sampler's."""
    distinct: dict[tuple[int, ...], int] = {}
    prompt_of_rows = [[distinct.setdefault(tuple(s.prompt_ids), len(distinct)) for s in part] for part in parts]
    prompt_ids, prompt_mask = left_pad([list(p[skip:]) for p in distinct], pad_id, device)
    positions = (prompt_mask.cumsum(dim=1) - 1).clamp(min=0) + skip
    return [_micro_batch(part, prompt_of_row, prompt_ids, prompt_mask, positions, pad_id, device, drop_zero_advantage)
            for part, prompt_of_row in zip(parts, prompt_of_rows)]


def collate(samples: list[TrainSample], pad_id: int, device, *, drop_zero_advantage: bool = False,
            skip: int = 0) -> MicroBatch:
    """The :class:`MicroBatch` of ``samples`` alone (a prompt pass of one micro-batch;
    see :func:`collate_pass`)."""
    return collate_pass([samples], pad_id, device, drop_zero_advantage=drop_zero_advantage, skip=skip)[0]


def _micro_batch(samples: list[TrainSample], prompt_of_row: list[int], prompt_ids: torch.Tensor,
                 prompt_mask: torch.Tensor, prompt_positions: torch.Tensor, pad_id: int, device,
                 drop_zero_advantage: bool) -> MicroBatch:
    width = max(len(s.completion_ids) for s in samples)
    comp, attn, mask, old, adv = [], [], [], [], []
    for s in samples:
        pad = [0.0] * (width - len(s.completion_ids))
        advantages = s.advantages()
        trained = s.mask()
        if drop_zero_advantage:
            trained = [m if a != 0.0 else 0.0 for m, a in zip(trained, advantages)]
        comp.append(s.completion_ids + [pad_id] * len(pad))
        attn.append([1] * len(s.completion_ids) + [0] * len(pad))
        mask.append(list(trained) + pad)
        old.append(list(s.old_logprobs) + pad)
        adv.append(list(advantages) + pad)
    as_long = lambda x: torch.tensor(x, dtype=torch.long, device=device)  # noqa: E731
    as_float = lambda x: torch.tensor(x, dtype=torch.float32, device=device)  # noqa: E731
    return MicroBatch(prompt_ids=prompt_ids, prompt_mask=prompt_mask, prompt_positions=prompt_positions,
                      prompt_of_row=as_long(prompt_of_row), completion_ids=as_long(comp),
                      completion_mask=as_long(attn), mask=as_float(mask), old_logprobs=as_float(old),
                      advantages=as_float(adv))
