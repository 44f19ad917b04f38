"""Supervised fine-tuning: the one loop that teaches a policy its transcripts before RL.

Two callers share it (there is no third training loop beside it and the RL
trainer): the tiny policy's build (``engine.train.warm_start``: a fresh model,
every weight trains) and a real model's warm start
(``engine.train.adapter_warm_start``: only the run's LoRA adapter trains).
The loss is next-token cross-entropy on the completion tokens only, the
assistant's turns (TRL's SFTTrainer with ``assistant_only_loss``), in the chat
format RL samples in: each context is what ``Policy.render`` gives the sampler
for that turn, each completion the turn's tokens through its end-of-turn id.

A batch's contexts begin alike (the system prompt, the tools); the shared
part is read once a batch and its keys and values reused by every row
(:func:`sft_backward`), and the rows are cut into chunks of similar length, so
no row pays for the system prompt or for another row's padding.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from rlab.engine.policy.kv import shared_prefix_length, with_cache
from rlab.engine.policy.model import Policy
from rlab.engine.train.trainer import SharedPrefix
from rlab.engine.types import Message

#: Rows per forward pass of :func:`sft_backward`: a batch is cut into chunks of this many rows of
#: similar length, each padded only to its own longest row.
CHUNK_ROWS = 8


@dataclass(frozen=True)
class SftPair:
    """One supervised example: ``context`` token ids the model reads (no loss) and the
    ``completion`` ids it learns to write, its end-of-turn (EOS) id last."""

    context: tuple[int, ...]
    completion: tuple[int, ...]


@dataclass(frozen=True)
class SftRecipe:
    """How the loop trains: AdamW at ``lr`` (no weight decay) after a linear warm-up of
    ``warm_up`` steps, ``batch`` pairs a step drawn without replacement, gradients clipped
    to ``clip`` (L2 norm)."""

    lr: float
    warm_up: int
    batch: int
    clip: float = 1.0


def text_pairs(policy: Policy, pairs: Sequence[tuple[str, str]]) -> list[SftPair]:
    """(prompt, completion) texts as token pairs, the completion ending with EOS (the tiny
    policy of a single-turn scenario, which has no chat template)."""
    tok = policy.tokenizer
    return [SftPair(tuple(tok.encode(prompt, add_special_tokens=False)),
                    (*tok.encode(completion, add_special_tokens=False), policy.eos_id)) for prompt, completion in pairs]


def transcript_pairs(policy: Policy, transcripts: Sequence[Sequence[Message]], system_prompt: str | None,
                     tools: list[dict[str, Any]] | None) -> list[SftPair]:
    """A pair for every assistant turn of ``transcripts`` (but those marked ``"train": False``,
    context only): the conversation before it, after ``system_prompt``, rendered for
    generation with ``tools`` exactly as the sampler sees it (``Policy.render``), and the
    turn's own tokens as the template writes them (its calls in the template's tool format,
    else the engine's Hermes convention) through its EOS.

    Raises:
        ValueError: the chat template does not render a turn as an extension of its
            context, or ends it without the EOS token; the message names the turn.
    """
    head: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    out = []
    for number, transcript in enumerate(transcripts):
        conversation = head + [{k: v for k, v in m.items() if k != "train"} for m in transcript]
        for i, message in enumerate(transcript, start=len(head)):
            if message["role"] != "assistant" or message.get("train") is False:
                continue
            context = policy.render(conversation[:i], tools)
            whole = policy.render(conversation[:i + 1], tools, generation_prompt=False)
            turn = whole[len(context):]
            if whole[:len(context)] != context or policy.eos_id not in turn:
                raise ValueError(f"transcript {number + 1}, message {i + 1 - len(head)}: the chat template does "
                                 "not render this assistant turn as its context followed by the turn and EOS")
            out.append(SftPair(tuple(context), tuple(turn[:turn.index(policy.eos_id) + 1])))
    return out


def sft_backward(model: torch.nn.Module, pairs: Sequence[SftPair], pad_id: int,
                 autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext) -> float:
    """Backpropagate the mean next-token cross-entropy of ``pairs``' completions into the
    trainable weights' ``.grad`` (added to what is there); return it (nats per completion token).

    The contexts' shared prefix (``engine.policy.kv.shared_prefix_length``, the sampler's and
    the RL update's rule) runs once, batch 1, and its keys and values serve every row
    (``engine.train.trainer.SharedPrefix``, as in the RL update); each row then reads only
    its own tokens, in chunks of :data:`CHUNK_ROWS` rows sorted by length, each chunk's
    backward pass run before the next chunk's forward. The same loss and gradients as the
    plain padded batch (tests/test_sft.py: loss within 1e-4). ``autocast``: the run's
    mixed-precision context (bf16 where the CPU or GPU has it).
    """
    contexts = [list(p.context) for p in pairs]
    shared = shared_prefix_length(contexts)
    device = next(model.parameters()).device
    prefix = SharedPrefix.run(model, contexts[0][:shared], device, autocast) if shared else None
    rows = sorted(pairs, key=lambda p: len(p.context) + len(p.completion))
    count = sum(len(p.completion) for p in pairs)
    total = 0.0
    for start in range(0, len(rows), CHUNK_ROWS):
        with autocast():
            nll = _chunk_nll(model, rows[start:start + CHUNK_ROWS], shared, prefix, pad_id, device)
        (nll / count).backward()
        total += nll.item()
    if prefix is not None:
        prefix.backward()
    return total / count


def _chunk_nll(model: torch.nn.Module, chunk: Sequence[SftPair], shared: int, prefix: SharedPrefix | None,
               pad_id: int, device: torch.device) -> torch.Tensor:
    """Summed completion NLL (nats) of ``chunk``'s rows, each read after the ``shared`` prefix."""
    rows = [(p.context + p.completion)[shared:] for p in chunk]
    width = max(len(r) for r in rows)
    ids = torch.tensor([list(r) + [pad_id] * (width - len(r)) for r in rows], device=device)
    # a row's loss starts at its first completion token; right padding is never attended to
    mask = torch.zeros(len(rows), width, device=device)
    for k, p in enumerate(chunk):
        mask[k, len(p.context) - shared:len(p.context) - shared + len(p.completion)] = 1.0
    cache = {} if prefix is None else with_cache(model, prefix.cache(len(rows)))
    logits = model(input_ids=ids, **cache, use_cache=prefix is not None).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                            reduction="none").view_as(mask[:, 1:])
    return (nll * mask[:, 1:]).sum()


def fit(model: torch.nn.Module, pairs: Sequence[SftPair], *, pad_id: int, steps: int, recipe: SftRecipe,
        rng: random.Random, after_step: Callable[[int, float], bool],
        autocast: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext) -> int:
    """Train ``model``'s trainable weights on ``pairs`` for up to ``steps`` steps (see
    :class:`SftRecipe`); ``after_step(step, loss)`` runs after each and ends the loop by
    returning True. Returns the steps taken."""
    weights = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(weights, lr=recipe.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / recipe.warm_up))
    for step in range(1, steps + 1):
        model.train()
        optimizer.zero_grad()
        loss = sft_backward(model, rng.sample(pairs, min(recipe.batch, len(pairs))), pad_id, autocast)
        torch.nn.utils.clip_grad_norm_(weights, recipe.clip)
        optimizer.step()
        schedule.step()
        if after_step(step, loss):
            return step
    return steps
