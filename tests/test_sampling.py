"""The KV-cache sampler (engine.policy.sampling) on the untrained tiny model."""

from __future__ import annotations

import os

import pytest
import torch

from rlab.engine.policy import kv, sampling
from rlab.engine.policy.model import Policy
from rlab.engine.policy.kv import PrefixCache, left_pad

# transformers 5.2x renamed forward's `past_key_values` to `cache` and warns on
# the old name: every sampling path here passes the cache the way it wants.
pytestmark = pytest.mark.filterwarnings("error:`past_key_values` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def policy(raw_tiny_model_dir):
    return Policy.load(raw_tiny_model_dir, "cpu")


def _prompts(policy, n):
    return [policy.render([{"role": "user", "content": f"{10 + i}+{3 * i}="}]) for i in range(n)]


def test_sampled_logprobs_are_those_of_a_full_forward_pass(policy):
    prompts = [p for p in _prompts(policy, 3) for _ in range(4)] + [policy.render([{"role": "user", "content": "7="}])]
    torch.manual_seed(0)
    samples = policy.sample(prompts, max_new_tokens=6, temperature=0.7)
    for prompt, s in zip(prompts, samples):
        ids = torch.tensor([prompt + s.token_ids])
        logits = policy.model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.token_ids).unsqueeze(1)).squeeze(1)
        assert s.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_greedy_matches_transformers_generate(policy):
    prompts = _prompts(policy, 5) + [policy.render([{"role": "user", "content": "99+1="}])]
    ids, mask = left_pad(prompts, policy.pad_id, "cpu")
    out = policy.model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=5,
                                pad_token_id=policy.pad_id, eos_token_id=policy.eos_id)
    ours = policy.sample(prompts, max_new_tokens=5, temperature=0)
    for row, s in zip(out[:, ids.shape[1]:].tolist(), ours):
        assert s.token_ids == row[: len(s.token_ids)]
        assert s.truncated == (policy.eos_id not in s.token_ids)


def test_repeated_prompts_share_one_prefill_and_finished_rows_stop(policy, monkeypatch):
    """Every row emits EOS at once: one forward pass (the prefill of the one
    distinct prompt) serves all eight rows, and no decoding step runs."""
    calls = []
    real = policy.model.forward

    def forced_eos(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(kwargs["input_ids"].shape)
        out.logits[..., policy.eos_id] = 1e4
        return out

    monkeypatch.setattr(policy.model, "forward", forced_eos)
    samples = policy.sample(_prompts(policy, 1) * 8, max_new_tokens=6, temperature=1.0)
    assert [s.token_ids for s in samples] == [[policy.eos_id]] * 8
    assert len(calls) == 1 and calls[0][0] == 1


def _system_prompts(policy, n):
    """n prompts that share a long start (a system prompt and the template) and then differ."""
    system = {"role": "system", "content": "Answer with the number only, and nothing else at all."}
    return [policy.render([system, {"role": "user", "content": f"{10 + i}+{3 * i}="}]) for i in range(n)]


def test_the_start_all_prompts_share_runs_once_and_samples_what_a_full_prefill_samples(policy, monkeypatch):
    """A system prompt common to every prompt is prefilled once (a forward pass over
    its tokens alone), the prompts run only what follows it, and the greedy tokens
    and sampled log-probs are those of a full forward pass over each prompt."""
    prompts = [p for p in _system_prompts(policy, 4) for _ in range(2)]
    shared = len(os.path.commonprefix(prompts))
    assert shared >= kv.MIN_SHARED_PREFIX_TOKENS
    widths = []
    real = policy.model.forward

    def recorded(*args, **kwargs):
        widths.append(tuple(kwargs["input_ids"].shape))
        return real(*args, **kwargs)

    monkeypatch.setattr(policy.model, "forward", recorded)
    torch.manual_seed(0)
    samples = policy.sample(prompts, max_new_tokens=5, temperature=0.7)
    assert widths[0] == (1, shared)
    assert widths[1] == (4, max(len(p) for p in prompts) - shared)  # the 4 distinct prompts' own tokens
    monkeypatch.undo()
    for prompt, s in zip(prompts, samples):
        ids = torch.tensor([prompt + s.token_ids])
        logits = policy.model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.token_ids).unsqueeze(1)).squeeze(1)
        assert s.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    ids, mask = left_pad(prompts, policy.pad_id, "cpu")
    out = policy.model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=5,
                                pad_token_id=policy.pad_id, eos_token_id=policy.eos_id)
    for row, s in zip(out[:, ids.shape[1]:].tolist(), policy.sample(prompts, max_new_tokens=5, temperature=0)):
        assert s.token_ids == row[: len(s.token_ids)]


def test_prompts_that_share_too_little_are_prefilled_whole(policy, monkeypatch):
    prompts = [[5, 6, 7, 8, 9], [5, 6, 7, 1, 2, 3]]  # 3 tokens in common: under the minimum
    widths = []
    real = policy.model.forward
    monkeypatch.setattr(policy.model, "forward",
                        lambda *a, **k: widths.append(tuple(k["input_ids"].shape)) or real(*a, **k))
    policy.sample(prompts, max_new_tokens=1, temperature=0)
    assert widths == [(2, 6)]


def _next_turn(policy, prompt, sample, observation):
    """The next turn's context: this one, the sampled tokens, then the observation's tokens."""
    return prompt + sample.token_ids + policy.tokenizer.encode(observation, add_special_tokens=False)


def test_a_turn_extending_the_last_reuses_its_kv_and_samples_what_a_full_prefill_samples(policy):
    """Cache reuse == full re-prefill: the same greedy tokens and log-probs for
    prompts that extend the last call's rows, with only their new tokens run."""
    first = [p for p in _prompts(policy, 3) for _ in range(2)]
    cache = PrefixCache()
    turn1 = policy.sample(first, max_new_tokens=5, temperature=0.7, cache=cache)  # rows diverge
    second = [_next_turn(policy, p, s, f" ok {i}?") for i, (p, s) in enumerate(zip(first, turn1))]
    prefilled = cache.prefilled_tokens
    reused = policy.sample(second, max_new_tokens=6, temperature=0, cache=cache)
    fresh = policy.sample(second, max_new_tokens=6, temperature=0)
    assert [s.token_ids for s in reused] == [s.token_ids for s in fresh]
    for a, b in zip(reused, fresh):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    # Each row's KV covers its prompt and all sampled tokens but the last.
    kept = sum(len(p) + len(s.token_ids) - 1 for p, s in zip(first, turn1))
    assert cache.reused_tokens == kept
    assert cache.prefilled_tokens - prefilled == sum(len(p) for p in second) - kept


def test_a_prompt_that_does_not_extend_a_kept_row_is_prefilled_whole(policy):
    """Prefix mismatch (an earlier turn rendered differently): that row runs
    its whole prompt, the others still reuse their rows, and nothing sampled changes."""
    first = _prompts(policy, 2)
    cache = PrefixCache()
    turn1 = policy.sample(first, max_new_tokens=4, temperature=0, cache=cache)
    second = [_next_turn(policy, p, s, " next?") for p, s in zip(first, turn1)]
    second[1] = [second[1][0] + 1] + second[1][1:]  # its first token no longer matches
    reused = policy.sample(second, max_new_tokens=5, temperature=0, cache=cache)
    fresh = policy.sample(second, max_new_tokens=5, temperature=0)
    assert [s.token_ids for s in reused] == [s.token_ids for s in fresh]
    assert cache.reused_tokens == len(first[0]) + len(turn1[0].token_ids) - 1


def test_a_cache_over_its_budget_keeps_nothing_and_changes_nothing(policy):
    prompts = _prompts(policy, 2)
    cache = PrefixCache(budget_bytes=0)
    turn1 = policy.sample(prompts, max_new_tokens=3, temperature=0, cache=cache)
    second = [_next_turn(policy, p, s, " again?") for p, s in zip(prompts, turn1)]
    assert ([s.token_ids for s in policy.sample(second, max_new_tokens=4, temperature=0, cache=cache)]
            == [s.token_ids for s in policy.sample(second, max_new_tokens=4, temperature=0)])
    assert cache.reused_tokens == 0


def test_episodes_played_with_the_turn_cache_equal_episodes_played_without(policy):
    """End to end on number_guess: greedy episodes are identical whether each
    turn extends the last turn's KV or re-runs the whole conversation."""
    from rlab.engine.rollout.episodes import run_episodes
    from rlab.scenarios import get_scenario

    class NoCache:
        render = policy.render

        def sample(self, prompt_ids, *, cache=None, **kwargs):
            return policy.sample(prompt_ids, **kwargs)

    scenario = get_scenario("number_guess")
    examples = scenario.eval_examples()[:6]
    kwargs = dict(max_turns=4, max_new_tokens=4, temperature=0.0, system_prompt=scenario.system_prompt)
    cached = run_episodes(policy, scenario.make_env, examples, **kwargs)
    plain = run_episodes(NoCache(), scenario.make_env, examples, **kwargs)
    assert [t.messages for t in cached] == [t.messages for t in plain]
    assert sum(len(t.turns) for t in cached) > len(examples)  # episodes had later turns to reuse


@pytest.mark.parametrize("temperature", [0.7, 0])
def test_the_static_cache_path_samples_with_the_sampling_distributions_logprobs(policy, temperature):
    """--generation hf_static: transformers' generate, the same Samples and log-probs as the loop's contract."""
    prompts = [p for p in _prompts(policy, 3) for _ in range(2)] + [policy.render([{"role": "user", "content": "7="}])]
    policy.generation = "hf_static"
    try:
        torch.manual_seed(0)
        samples = policy.sample(prompts, max_new_tokens=6, temperature=temperature)
    finally:
        policy.generation = "loop"
    scale = temperature or 1.0
    for prompt, s in zip(prompts, samples):
        assert 1 <= len(s.token_ids) <= 6 and s.truncated == (policy.eos_id not in s.token_ids)
        ids = torch.tensor([prompt + s.token_ids])
        logits = policy.model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / scale
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.token_ids).unsqueeze(1)).squeeze(1)
        assert s.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    if temperature == 0:
        assert [s.token_ids for s in samples] == [s.token_ids for s in policy.sample(prompts, max_new_tokens=6,
                                                                                    temperature=0)]


def test_turns_of_equal_length_reuse_kv_without_a_gather_and_sample_the_same(policy, monkeypatch):
    """The lakes' case: every row's kept prefix and new observation have one length,
    so the cache is already right-aligned and is only cut (no sort, no gather),
    and what is sampled equals a full prefill."""
    base = _prompts(policy, 1)[0]
    first = [base[:-1] + [base[-1] + i] for i in range(3)]  # three prompts of one length
    cache = PrefixCache()
    turn1 = policy.sample(first, max_new_tokens=1, temperature=0, cache=cache)
    second = [_next_turn(policy, p, s, f" map {i}") for i, (p, s) in enumerate(zip(first, turn1))]
    fresh = policy.sample(second, max_new_tokens=4, temperature=0)

    def no_sort(*args, **kwargs):
        raise AssertionError("aligned rows must not be sorted and gathered")

    monkeypatch.setattr(sampling.torch, "sort", no_sort)
    reused = policy.sample(second, max_new_tokens=4, temperature=0, cache=cache)
    assert cache.reused_tokens == sum(len(p) for p in first)
    assert [s.token_ids for s in reused] == [s.token_ids for s in fresh]
    for a, b in zip(reused, fresh):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_a_lora_wrapped_policy_samples_what_its_base_samples(raw_tiny_model_dir):
    """peft's wrapper hands the KV cache on to the base model's forward, under
    the name that forward takes (a new LoRA adapter is zero: the same model)."""
    from rlab.engine.policy.lora import LoraSettings, apply_lora

    plain, wrapped = Policy.load(raw_tiny_model_dir, "cpu"), Policy.load(raw_tiny_model_dir, "cpu")
    wrapped.model = apply_lora(wrapped.model, LoraSettings(rank=4))
    prompts = _prompts(plain, 3) * 2
    torch.manual_seed(0)
    expected = plain.sample(prompts, max_new_tokens=5, temperature=1.0)
    torch.manual_seed(0)
    assert [s.token_ids for s in wrapped.sample(prompts, max_new_tokens=5, temperature=1.0)] == \
        [s.token_ids for s in expected]


def test_a_model_from_before_the_rename_gets_past_key_values():
    """transformers before 5.2x (pyproject allows 4.46) takes only ``past_key_values``."""

    class OldCausalLM:
        def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=None):
            return None

    class NewCausalLM:
        def forward(self, input_ids, attention_mask=None, cache=None, use_cache=None):
            return None

    assert list(kv.with_cache(OldCausalLM(), "kv")) == ["past_key_values"]
    assert list(kv.with_cache(NewCausalLM(), "kv")) == ["cache"]


def test_a_draw_follows_the_tempered_softmax_and_its_logprob_is_the_tokens():
    torch.manual_seed(0)
    logits = torch.randn(1, 40) * 2
    logits[0, -6:] = -1e9  # a tail of probability 0, as a masked vocabulary has
    draws = 100_000
    token, logprob = sampling._pick(logits.expand(draws, -1).contiguous(), 0.7)
    expected = torch.softmax(logits[0] / 0.7, -1)
    frequency = torch.bincount(token, minlength=40).float() / draws
    # 4 standard errors of a frequency, per token: a wrong distribution (e.g. temperature 1) is far outside.
    assert torch.all((frequency - expected).abs() <= 4 * (expected * (1 - expected) / draws).sqrt() + 1e-6)
    assert int((token >= 34).sum()) == 0
    assert logprob == pytest.approx(torch.log_softmax(logits[0] / 0.7, -1)[token], abs=1e-5)


def test_a_draw_at_the_top_of_the_cdf_takes_the_last_token_of_mass_not_a_zero(monkeypatch):
    probs = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    monkeypatch.setattr(sampling.torch, "rand", lambda shape, **kw: torch.ones(shape, **kw))  # rounds up to the total
    assert sampling._inverse_cdf(probs).tolist() == [1, 3]
