"""The tiny policy's definition: its tokenizer, its model config, where its builds live.

No download is ever needed: the tokenizer is character-level (built with the
``tokenizers`` library) and the model is a small Llama-architecture causal
LM (about 0.5 M parameters). Its weights come from a supervised warm start
on the scenario's own train split (``engine.train.warm_start``); the result
is an ordinary Hugging Face model directory (``save_pretrained``), loaded by
the same code as any ``--model PATH``.

Every built-in scenario's seed-0 policy ships as package data in
``engine/policy/embedded/<scenario>/`` (written by ``python -P -m
rlab.engine.train.build_tiny``), so every machine starts from the same
weights and nothing is built on first use; other seeds and user tasks are
built once and cached (:func:`model_key`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, PreTrainedTokenizerFast

from rlab.engine.policy.model import Policy
from rlab.engine.types import Scenario, ToolScenario

#: Bump when the recipe changes, so stale cached models are rebuilt.
RECIPE_VERSION = 2
#: The shipped models, one folder per built-in scenario, each with its manifest
#: (file sha256s, recipe, scores): ``embedded/<scenario>/``.
EMBEDDED_DIR = Path(__file__).with_name("embedded")
MANIFEST_NAME = "MANIFEST.json"
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHARSET = [chr(c) for c in range(32, 127)] + ["\n"]

# The tiny model sees a conversation as its messages' contents in order;
# each assistant message ends with EOS (what it learns to emit to stop).
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
)


# The tiny policy of a tool scenario reads and writes tools through its template
# (engine.tools.render): its tools as one line after the system prompt, each call as
# engine.tools.calls.call_text writes it, each result after "= " on a line of its own.
TOOL_CHAT_TEMPLATE = (
    "{% macro tool_line() %}tools: {% for t in tools %}{{ t['function']['name'] }}("
    "{{ t['function']['parameters']['properties'] | join(', ') }}){% if not loop.last %}, {% endif %}"
    "{% endfor %}{{ '\\n' }}{% endmacro %}"
    "{% if tools and (not messages or messages[0]['role'] != 'system') %}{{ tool_line() }}{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}{% if tools %}{{ tool_line() }}{% endif %}"
    "{% elif m['role'] == 'assistant' %}{{ m['content'] }}"
    "{% for c in m['tool_calls'] or [] %}{% if m['content'] or not loop.first %}{{ '\\n' }}{% endif %}"
    "{{ '<tool_call>\\n' }}{{ {'name': c['function']['name'], 'arguments': c['function']['arguments']} | tojson }}"
    "{{ '\\n</tool_call>' }}{% endfor %}{{ eos_token }}"
    "{% elif m['role'] == 'tool' %}{{ '= ' + m['content'] + '\\n' }}"
    "{% else %}{{ m['content'] + '\\n' }}{% endif %}{% endfor %}"
)


def build_tokenizer(tools: bool = False) -> PreTrainedTokenizerFast:
    """A character-level tokenizer: one token per printable ASCII char or newline.

    ``tools``: its chat template renders tools, calls and results
    (:data:`TOOL_CHAT_TEMPLATE`, a tool scenario's tiny policy), else only the
    messages' contents (:data:`CHAT_TEMPLATE`)."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARSET)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
    )
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE if tools else CHAT_TEMPLATE
    return tokenizer


CONTEXT_TOKENS = 256
"""The tiny policy's context (tokens) unless a scenario asks for more (``tiny_context_tokens``)."""


def build_config(vocab_size: int, context_tokens: int = CONTEXT_TOKENS) -> LlamaConfig:
    """The tiny Llama config: 3 layers, width 128, 4 heads, a ``context_tokens``
    context (rotary positions; 0.5 M parameters whatever the context)."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=context_tokens,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


def context_tokens(scenario: Scenario) -> int:
    """The context (tokens) of ``scenario``'s tiny policy: its ``tiny_context_tokens``
    (a scenario whose longest episode needs more room), else :data:`CONTEXT_TOKENS`."""
    return scenario.tiny_context_tokens or CONTEXT_TOKENS


def model_key(scenario_name: str, seed: int, target: float | None, max_steps: int,
              system_prompt: str | None = None, context_tokens: int = CONTEXT_TOKENS,
              tools: str | None = None) -> str:
    """Cache key of a built model: scenario, seed, warm-start settings and recipe version,
    plus the system prompt where the warm start trains on it (multi-step scenarios),
    a context other than :data:`CONTEXT_TOKENS` and a tool scenario's ``tools`` (its
    tools file's text and its warm-start transcripts; keys of the others stay as they
    were)."""
    parts: list = [scenario_name, seed, target, max_steps, RECIPE_VERSION]
    if context_tokens != CONTEXT_TOKENS:
        parts.append(context_tokens)
    if tools is not None:
        parts.append(hashlib.sha256(tools.encode()).hexdigest())
    raw = json.dumps(parts if system_prompt is None else parts + [system_prompt])
    return f"{scenario_name}-s{seed}-{hashlib.sha256(raw.encode()).hexdigest()[:10]}"


def scenario_model_key(scenario: Scenario, seed: int) -> str:
    """:func:`model_key` of ``scenario``'s tiny policy for ``seed``: its warm-start
    target and budget, its system prompt where the warm start trains on it
    (multi-step scenarios, ``scenarios.imitation``), its context and, for a tool
    scenario, its tools and warm-start transcripts."""
    prompt = scenario.system_prompt if scenario.multi_step else None
    # a tool task's tiny policy is its tools and its transcripts: either edited, it is built again
    tools = (scenario.tools_file.read_text(encoding="utf-8") + json.dumps(scenario.sft_transcripts(seed), sort_keys=True)
             if isinstance(scenario, ToolScenario) else None)
    return model_key(scenario.name, seed, scenario.warm_start_target, scenario.warm_start_steps, prompt,
                     context_tokens(scenario), tools)


def embedded_dir(scenario_name: str) -> Path:
    """The folder of the tiny policy shipped for a built-in scenario (it may not exist)."""
    return EMBEDDED_DIR / scenario_name


def shipped_manifest(scenario_name: str = "arithmetic") -> dict | None:
    """The manifest of the policy shipped for ``scenario_name``
    (``embedded/<scenario>/MANIFEST.json``), or None if none is shipped."""
    path = embedded_dir(scenario_name) / MANIFEST_NAME
    return json.loads(path.read_text()) if path.is_file() else None


def shipped_model_dir(scenario: Scenario, seed: int) -> Path | None:
    """The shipped model directory when it was built for ``scenario`` as it is
    now (its :func:`scenario_model_key`: name, seed, warm-start settings,
    prompt, context, recipe version), else None."""
    manifest = shipped_manifest(scenario.name)
    if manifest is None or manifest.get("key") != scenario_model_key(scenario, seed):
        return None
    return embedded_dir(scenario.name)


def save_policy(policy: Policy, path: Path) -> None:
    """Write ``policy`` as a Hugging Face model directory (safetensors + tokenizer)."""
    policy.model.save_pretrained(path)
    policy.tokenizer.save_pretrained(path)
