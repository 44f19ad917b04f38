"""The policy: a Hugging Face causal LM and its tokenizer, for sampling and scoring.

The same code loads the embedded tiny model and any local model directory
(``--model PATH``); prompts are always rendered through the tokenizer's chat
template, so scenarios written as messages work unchanged for both.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, cast
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rlab.engine.policy.kv import PrefixCache
from rlab.engine.policy.sampling import sample as sample_with_cache
from rlab.engine.policy.sampling_weights import SamplingWeights
from rlab.engine.policy.static_generation import sample_static
from rlab.engine.tools.render import tool_prompt
from rlab.engine.types import Sample
from rlab.store.errors import UsageError


#: Rendered prompts kept by :meth:`Policy.render` (cleared when full).
RENDER_CACHE_SIZE = 20_000


class ModelLoadError(UsageError, RuntimeError):
    """A model directory is missing or is not a Hugging Face causal LM."""


def default_device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


class Policy:
    """A causal LM with its tokenizer, placed on one device.

    Args:
        model: a ``transformers`` causal LM (``PreTrainedModel``).
        tokenizer: its tokenizer; must have a chat template, a pad token and
            an EOS token.
        device: torch device string, e.g. ``"cpu"`` or ``"cuda"``.

    Attributes:
        generation: ``"loop"`` (``engine.policy.sampling``, the default) or
            ``"hf_static"`` (``engine.policy.static_generation``) for calls
            without a prefix cache (single-turn rollouts and evals).
        sample_dtype: None samples with the model's own weights (a LoRA
            adapter merged in: ``engine.policy.sampling_weights``);
            ``torch.bfloat16`` with a bf16 copy of them.
        sample_int8: sample with an int8 copy of the linear layers
            (``engine.policy.sampling_weights``, ``--sampler-int8``).
    """

    def __init__(self, model, tokenizer: PreTrainedTokenizerBase, device: str):
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.device = device
        self.generation = "loop"
        self.sample_dtype: torch.dtype | None = None
        self.sample_int8 = False
        self._sampling: dict[tuple[torch.dtype | None, bool], SamplingWeights] = {}
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.pad_id = int(tokenizer.pad_token_id)
        self.eos_id = int(tokenizer.eos_token_id)
        self._rendered: dict[str, tuple[int, ...]] = {}

    @classmethod
    def load(cls, path: str | Path, device: str | None = None) -> "Policy":
        """Load a model directory saved with ``save_pretrained``.

        Raises:
            ModelLoadError: the directory does not exist or holds no loadable
                causal LM / tokenizer; the message names the path.
        """
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"model directory {path} not found or has no config.json; "
                "pass --model with a directory saved by save_pretrained"
            )
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        except (OSError, ValueError) as err:
            raise ModelLoadError(f"cannot load the model in {path}: {err}") from err
        return cls(model, tokenizer, device or default_device())

    def render(self, messages: list[dict], tools: list[dict] | None = None, *,
               generation_prompt: bool = True) -> list[int]:
        """Token ids of ``messages`` through the chat template, ready for generation
        (``generation_prompt=False``: as a finished conversation, its last turn closed).

        ``tools`` (JSON schemas, OpenAI's function format) go to a template
        that renders tools, else into the messages by the convention of
        ``engine.tools.render``. Renders are memoised by the messages' and
        tools' JSON: the template costs about a millisecond a call and every
        step re-renders its prompts.
        """
        key = json.dumps([messages, tools, generation_prompt], sort_keys=True, default=str)
        ids = self._rendered.get(key)
        if ids is None:
            if len(self._rendered) >= RENDER_CACHE_SIZE:
                self._rendered.clear()
            shown, offered = tool_prompt(messages, tools, self.tokenizer.chat_template)
            # tokenize=True, return_dict=False: a flat list of token ids
            ids = self._rendered[key] = tuple(cast(list[int], self.tokenizer.apply_chat_template(
                shown, tools=cast(Any, offered), add_generation_prompt=generation_prompt, tokenize=True, return_dict=False
            )))
        return list(ids)

    def sample(
        self,
        prompt_ids: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        cache: PrefixCache | None = None,
    ) -> list[Sample]:
        """Sample one completion per prompt (greedy when ``temperature`` is 0).

        Args:
            prompt_ids: B prompts, each a list of token ids (any lengths;
                left-padded internally; repeated prompts share one prefill).
            max_new_tokens: generation budget per completion, in tokens.
            temperature: softmax temperature; 0 means greedy decoding.
            cache: the previous call's rows, which prompts may extend (the
                turns of multi-turn episodes); this call's rows are kept there.

        Returns:
            B :class:`Sample` s; ``logprobs`` are those of the sampling
            distribution (temperature applied; for greedy, temperature 1).
            See :mod:`rlab.engine.policy.sampling` for the loop.
        """
        model = self.sampling_model()
        if self.generation == "hf_static" and cache is None:
            out = sample_static(model, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                                pad_id=self.pad_id, eos_id=self.eos_id, device=self.device)
        else:
            out = sample_with_cache(model, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature,
                                    pad_id=self.pad_id, eos_id=self.eos_id, device=self.device, cache=cache)
        return [self._to_sample(row, lp) for row, lp in zip(out.tokens, out.logprobs)]

    def sampling_model(self):
        """The model sampling runs: :attr:`model` itself, or its merged (and
        :attr:`sample_dtype` or int8) copy, current with the trained weights.
        Each kind of copy is kept (:meth:`exact_sampling` switches between two)."""
        key = (self.sample_dtype, self.sample_int8)
        weights = self._sampling.get(key)
        if weights is None or weights.trained is not self.model:
            weights = self._sampling[key] = SamplingWeights(self.model, *key)
        return weights.model()

    @contextlib.contextmanager
    def exact_sampling(self) -> Iterator[None]:
        """Within the block, an int8 sampler (:attr:`sample_int8`) samples with the trained
        weights instead (a LoRA adapter merged): a held-out eval measures the policy the run
        trains, not its int8 copy (on SmolLM2-135M greedy pass@1 0.17 against 0.67,
        docs/tasks.md). A bf16 copy stays: its log-probs are within 0.05 nats."""
        int8, self.sample_int8 = self.sample_int8, False
        try:
            yield
        finally:
            self.sample_int8 = int8

    def _to_sample(self, tokens: list[int], logprobs: list[float]) -> Sample:
        if self.eos_id in tokens:
            cut = tokens.index(self.eos_id) + 1
            return Sample(tokens[:cut], self._decode(tokens[: cut - 1]), logprobs[:cut], False)
        return Sample(tokens, self._decode(tokens), logprobs, True)

    def _decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True))
