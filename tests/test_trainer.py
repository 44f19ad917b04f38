"""The clipped policy-gradient update (engine.train.trainer) on the tiny model."""

import math

import numpy as np
import pytest
import torch

from rlab.engine.policy.model import Policy
from rlab.engine.train import microbatch as microbatch_module
from rlab.engine.train.microbatch import by_length, collate, micro_batches, vocab_size
from rlab.engine.train.trainer import Trainer, TrainConfig
from rlab.engine.types import TrainSample

# transformers 5.2x renamed forward's `past_key_values` to `cache` and warns on
# the old name: the update's prompt-sharing pass uses the name the model takes.
pytestmark = pytest.mark.filterwarnings("error:`past_key_values` is deprecated:FutureWarning")


@pytest.fixture
def policy(raw_tiny_model_dir):
    torch.manual_seed(0)
    return Policy.load(raw_tiny_model_dir, "cpu")


def _sample(policy, prompt: str, completion: str, advantage: float) -> TrainSample:
    prompt_ids = policy.render([{"role": "user", "content": prompt}])
    completion_ids = policy.tokenizer.encode(completion, add_special_tokens=False) + [policy.eos_id]
    old = _logprobs(policy, prompt_ids, completion_ids)
    return TrainSample(prompt_ids, completion_ids, old, advantage)


def _logprobs(policy, prompt_ids, completion_ids) -> list[float]:
    """Unpadded reference computation of the completion's token log-probs."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1).tolist()


def test_padded_batch_gives_the_unpadded_logprobs(policy):
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(temperature=1.0))
    samples = [_sample(policy, "1+2=", "3", 1.0), _sample(policy, "10+20=", "30", 1.0),
               _sample(policy, "99+99=", "198", 1.0)]
    batch = collate(samples, policy.pad_id, "cpu")
    logp, _ = trainer._token_logprobs(policy.model, batch)
    for row, sample in enumerate(samples):
        got = logp[row, : len(sample.completion_ids)].tolist()
        assert got == pytest.approx(sample.old_logprobs, abs=1e-4)


def _unpadded_logits(policy, sample: TrainSample) -> torch.Tensor:
    """Reference: the logits (W, V) predicting ``sample``'s completion, from one unpadded pass."""
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    return policy.model(input_ids=ids).logits[0, len(sample.prompt_ids) - 1: -1]


def test_entropies_match_the_full_softmax_at_the_sampling_temperature(policy):
    """The blockwise entropy (no (B, T, V) log-softmax kept) equals the textbook one."""
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(temperature=0.7))
    samples = [_sample(policy, f"{a}+{a}=", str(2 * a), 1.0) for a in range(1, 12)]  # > one entropy block
    with torch.no_grad():
        logp, entropy = trainer._token_logprobs(policy.model, collate(samples, policy.pad_id, "cpu"))
        for row, sample in enumerate(samples):
            reference = torch.log_softmax(_unpadded_logits(policy, sample) / 0.7, -1)
            n = len(sample.completion_ids)
            assert torch.allclose(entropy[row, :n], -(reference.exp() * reference).sum(-1), atol=1e-5)
            ids = torch.tensor(sample.completion_ids)[:, None]
            assert torch.allclose(logp[row, :n], reference.gather(-1, ids).squeeze(-1), atol=1e-5)


def test_shared_prompts_give_the_per_row_log_probs_and_gradients(policy):
    """A group's prompt runs once (its KV cache copied to the rows): same numbers as one pass per row."""
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(temperature=1.0))
    samples = [_sample(policy, prompt, completion, 1.0)
               for prompt in ("12+34=", "7+8=") for completion in ("46", "15", "1234", "")]
    batch = collate(samples, policy.pad_id, "cpu")
    assert batch.prompt_ids.shape[0] == 2 and batch.prompt_of_row.tolist() == [0] * 4 + [1] * 4
    logp, _ = trainer._token_logprobs(policy.model, batch)
    (logp * batch.mask).sum().backward()
    shared = [p.grad.clone() for p in policy.model.parameters()]
    policy.model.zero_grad()
    total = torch.zeros(())
    for row, sample in enumerate(samples):
        ids = torch.tensor(sample.completion_ids)[:, None]
        reference = torch.log_softmax(_unpadded_logits(policy, sample), -1).gather(-1, ids).squeeze(-1)
        assert torch.allclose(logp[row, : len(sample.completion_ids)], reference, atol=1e-5)
        total = total + reference.sum()
    total.backward()
    for got, want in zip(shared, (p.grad for p in policy.model.parameters())):
        assert torch.allclose(got, want, atol=1e-5)


def test_micro_batches_fit_the_logits_budget_and_keep_the_order(policy):
    samples = [_sample(policy, "1+1=", "2" * n, 1.0) for n in (1, 3, 2, 5, 1)]
    vocab = vocab_size(policy.model)
    widths = [len(s.completion_ids) for s in samples]
    budget = 3 * max(widths) * vocab * 4
    chunks = micro_batches(samples, vocab, budget)
    assert [s for chunk in chunks for s in chunk] == samples and len(chunks) > 1
    for chunk in chunks:
        assert len(chunk) == 1 or len(chunk) * max(len(s.completion_ids) for s in chunk) * vocab * 4 <= budget
    assert micro_batches(samples, vocab, 1) == [[s] for s in samples]  # over budget alone: one each


def test_walks_of_unequal_length_train_in_micro_batches_of_similar_width():
    """Issue 33: an 8 x 8 lake's episodes run 150 to 1,800 tokens. In one pass every
    short walk paid for the longest's width; now a group's samples come shortest
    first, and a micro-batch is cut where its padding would dominate."""
    prompt = list(range(5, 25))
    widths = [1200, 30, 1190, 40, 35, 1210]
    samples = [TrainSample(prompt, [7] * n, [0.0] * n, 1.0) for n in widths]
    ordered = by_length(samples)
    assert [len(s.completion_ids) for s in ordered] == sorted(widths)
    chunks = micro_batches(ordered, vocab=100, budget_bytes=2**30)
    assert [[len(s.completion_ids) for s in chunk] for chunk in chunks] == [[30, 35, 40], [1190, 1200, 1210]]
    short = [TrainSample(prompt, [7] * n, [0.0] * n, 1.0) for n in (2, 6, 3, 5) * 16]
    assert len(micro_batches(by_length(short), vocab=100, budget_bytes=2**30)) == 1  # little padding: one pass


def test_micro_batches_share_a_prompt_pass_while_their_prompts_fit_the_largest_micro_batchs():
    """Consecutive micro-batches run their prompts in one pass until the pass's distinct
    prompts (less the shared prefix) would hold more tokens than the largest micro-batch's
    own prompts: a prompt already in the pass costs nothing, so its memory stays that of
    one micro-batch's prompt pass."""
    a, b, c = [1] * 10 + [2] * 6, [1] * 10 + [3] * 6, [1] * 10 + [4] * 30
    part = lambda *prompts: [TrainSample(list(p), [7, 8], [0.0, 0.0], 1.0) for p in prompts]  # noqa: E731
    parts = [part(a, b), part(b, a), part(a), part(c), part(a, b)]
    assert microbatch_module.by_prompt_pass(parts, skip=10) == [parts[:3], parts[3:4], parts[4:]]  # c: 30 tokens
    assert microbatch_module.by_prompt_pass(parts[:3] + parts[4:], skip=10) == [parts[:3] + parts[4:]]
    assert microbatch_module.by_prompt_pass([part(a), part(b), part(a)], skip=10) == [[part(a)], [part(b)], [part(a)]]
    batches = microbatch_module.collate_pass(parts[:3], pad_id=0, device="cpu", skip=10)
    assert all(batch.prompt_ids is batches[0].prompt_ids for batch in batches)  # one set of prompt tensors
    assert batches[0].prompt_ids.shape == (2, 6) and [b.prompt_of_row.tolist() for b in batches] == [[0, 1], [1, 0], [0]]
    assert batches[0].prompt_positions[0].tolist() == list(range(10, 16))  # counted from the shared prefix


def test_micro_batched_update_equals_one_pass(policy, monkeypatch):
    """Gradient accumulation over micro-batches makes the update and the metrics of one full pass."""
    samples = [_sample(policy, prompt, completion, adv) for prompt in ("12+34=", "7+8=")
               for completion, adv in (("46", 1.0), ("15", -0.5), ("1234", 0.25), ("", -1.0))]
    start = {k: v.clone() for k, v in policy.model.state_dict().items()}
    config = TrainConfig(lr=1e-2, num_iterations=1, temperature=1.0, beta=0.1)
    whole = Trainer(policy.model, policy.pad_id, config).update(samples)
    whole_grads = [p.grad.clone() for p in policy.model.parameters()]  # the update leaves them in place
    policy.model.load_state_dict(start)
    monkeypatch.setattr(microbatch_module, "LOGITS_BUDGET_BYTES", 2 * 5 * vocab_size(policy.model) * 4)
    assert len(micro_batches(samples, vocab_size(policy.model), microbatch_module.LOGITS_BUDGET_BYTES)) >= 3
    split = Trainer(policy.model, policy.pad_id, config).update(samples)
    for key in ("loss", "kl", "entropy", "grad_norm"):
        assert split[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6)
    for got, want in zip(policy.model.parameters(), whole_grads):
        assert torch.allclose(got.grad, want, rtol=1e-4, atol=1e-7)


def test_advantage_sign_moves_the_completion_probability(policy):
    up = _sample(policy, "12+34=", "46", 1.0)
    down = _sample(policy, "12+34=", "99", -1.0)
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(lr=1e-2, num_iterations=1, temperature=1.0))
    metrics = trainer.step([up, down])
    assert metrics["trained_samples"] == 2
    assert sum(_logprobs(policy, up.prompt_ids, up.completion_ids)) > sum(up.old_logprobs)
    assert sum(_logprobs(policy, down.prompt_ids, down.completion_ids)) < sum(down.old_logprobs)
    assert math.isnan(metrics["kl"]) and metrics["grad_norm"] > 0 and metrics["entropy"] > 0


def test_loss_tokens_all_counts_the_zero_advantage_tokens_as_trl_dapo_does(policy):
    """With a group that has spread (3 tokens) and one without (5 tokens),
    ``all`` divides the same token sum by 8 instead of 3: the loss and the
    gradient are 3/8 of ``with_signal``'s, and entropy stays a mean over
    the trained tokens."""
    spread = [_sample(policy, "12+34=", "46", 1.0)]  # "46" + EOS: 3 tokens
    flat = [_sample(policy, "7+8=", "15", 0.0), _sample(policy, "7+8=", "1", 0.0)]  # 3 + 2 tokens
    start = {k: v.clone() for k, v in policy.model.state_dict().items()}
    runs = {}
    for loss_tokens in ("with_signal", "all"):
        policy.model.load_state_dict(start)
        config = TrainConfig(lr=1e-2, num_iterations=1, temperature=1.0, max_grad_norm=1e9,  # no clipping
                             loss_tokens=loss_tokens)
        metrics = Trainer(policy.model, policy.pad_id, config).update(spread + flat)
        runs[loss_tokens] = metrics, [p.grad.clone() for p in policy.model.parameters()]
    (signal, signal_grads), (every, every_grads) = runs["with_signal"], runs["all"]
    assert every["loss"] == pytest.approx(signal["loss"] * 3 / 8, rel=1e-5)
    assert every["grad_norm"] == pytest.approx(signal["grad_norm"] * 3 / 8, rel=1e-4)
    assert every["entropy"] == pytest.approx(signal["entropy"], rel=1e-5)
    assert every["trained_samples"] == signal["trained_samples"] == 1
    for got, want in zip(every_grads, signal_grads):
        assert torch.allclose(got, want * 3 / 8, rtol=1e-3, atol=1e-7)


def test_zero_advantages_make_no_update(policy):
    before = [p.detach().clone() for p in policy.model.parameters()]
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(num_iterations=2))
    metrics = trainer.step([_sample(policy, "1+1=", "2", 0.0)])
    assert metrics["trained_samples"] == 0 and math.isnan(metrics["loss"])
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))


def test_kl_to_the_reference_grows_from_zero(policy):
    sample = _sample(policy, "12+34=", "46", 1.0)
    trainer = Trainer(policy.model, policy.pad_id,
                      TrainConfig(lr=1e-2, beta=0.1, num_iterations=1, temperature=1.0))
    first = trainer.step([sample])
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before any update
    later = trainer.step([sample])
    assert later["kl"] > 1e-6


def test_second_iteration_clips_large_ratios(policy):
    sample = _sample(policy, "12+34=", "46", 1.0)
    trainer = Trainer(policy.model, policy.pad_id,
                      TrainConfig(lr=5e-2, num_iterations=3, clip_eps=0.05, temperature=1.0))
    assert trainer.update([sample])["clip_ratio"] == 0.0  # ratio is exactly 1 at first
    trainer.update([sample])
    assert trainer.update([sample])["clip_ratio"] > 0.0


def test_gradient_checkpointing_takes_the_one_pass_per_row_path_with_the_same_log_probs(policy):
    """Checkpointed layers keep no KV cache, so those models run prompt + completion per row."""
    from rlab.engine.policy.device import training_options

    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(temperature=1.0))
    samples = [_sample(policy, "12+34=", completion, 1.0) for completion in ("46", "15", "1234")]
    batch = collate(samples, policy.pad_id, "cpu")
    policy.model.train()
    with torch.no_grad():
        shared, _ = trainer._token_logprobs(policy.model, batch)
        training_options(policy.model, "cpu", gradient_checkpointing=True)
        per_row, _ = trainer._token_logprobs(policy.model, batch)
    assert torch.allclose(shared * batch.mask, per_row * batch.mask, atol=1e-5)


def test_a_short_cpu_update_runs_eager_attention_and_equals_the_sdpa_update(policy, monkeypatch):
    """CPU updates of short sequences swap SDPA for eager attention (device.training_attention):
    the same loss and gradients, and the model is left on SDPA (the sampling copy shares its config)."""
    from rlab.engine.policy import device

    samples = [_sample(policy, prompt, completion, adv) for prompt in ("12+34=", "7+8=")
               for completion, adv in (("46", 1.0), ("15", -0.5), ("1234", 0.25))]
    assert policy.model.config._attn_implementation == "sdpa"
    seen: list[str] = []
    policy.model.register_forward_pre_hook(lambda model, args: seen.append(model.config._attn_implementation))
    start = {k: v.clone() for k, v in policy.model.state_dict().items()}
    config = TrainConfig(lr=1e-2, num_iterations=1, temperature=1.0, beta=0.1)
    eager = Trainer(policy.model, policy.pad_id, config).update(samples)
    eager_grads = [p.grad.clone() for p in policy.model.parameters()]
    assert set(seen) == {"eager"} and policy.model.config._attn_implementation == "sdpa"
    policy.model.load_state_dict(start)
    seen.clear()
    monkeypatch.setattr(device, "CPU_EAGER_ATTENTION_MAX_TOKENS", 0)
    sdpa = Trainer(policy.model, policy.pad_id, config).update(samples)
    assert set(seen) == {"sdpa"}
    for key in ("loss", "kl", "entropy", "grad_norm"):
        assert sdpa[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6)
    for got, want in zip(policy.model.parameters(), eager_grads):
        assert torch.allclose(got.grad, want, rtol=1e-3, atol=1e-6)


def test_the_attention_is_restored_when_the_update_fails(policy):
    from rlab.engine.policy.device import training_attention

    with pytest.raises(RuntimeError), training_attention([policy.model], "cpu", tokens=10):
        assert policy.model.config._attn_implementation == "eager"
        raise RuntimeError("a failed backward")
    assert policy.model.config._attn_implementation == "sdpa"


def test_a_checkpointed_lora_update_recomputes_with_the_attention_it_saved(policy):
    """Checkpointed layers recompute their forward in the backward pass: that must meet the
    eager attention it ran (training_attention wraps both), and give the unchecked update."""
    from rlab.engine.policy.device import training_options
    from rlab.engine.policy.lora import LoraSettings, apply_lora

    model = apply_lora(policy.model, LoraSettings(rank=4))
    samples = [_sample(policy, "12+34=", completion, adv) for completion, adv in (("46", 1.0), ("15", -1.0))]
    start = {k: v.clone() for k, v in model.state_dict().items()}
    config = TrainConfig(lr=1e-2, num_iterations=1, temperature=1.0)
    plain = Trainer(model, policy.pad_id, config).update(samples)
    model.load_state_dict(start)
    training_options(model, "cpu", gradient_checkpointing=True)
    checked = Trainer(model, policy.pad_id, config).update(samples)
    assert checked["loss"] == pytest.approx(plain["loss"], rel=1e-4, abs=1e-6)  # two opposite advantages: ~0
    assert checked["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-3)
    assert model.get_base_model().config._attn_implementation == "sdpa"


def _system_sample(policy, question: str, completion: str, advantage: float) -> TrainSample:
    """A sample whose prompt starts with a system prompt every other sample's prompt shares."""
    system = {"role": "system", "content": "Answer with the number only, and nothing else at all."}
    prompt_ids = policy.render([system, {"role": "user", "content": question}])
    completion_ids = policy.tokenizer.encode(completion, add_special_tokens=False) + [policy.eos_id]
    return TrainSample(prompt_ids, completion_ids, _logprobs(policy, prompt_ids, completion_ids), advantage)


@pytest.mark.parametrize("lora", [False, True])
def test_the_start_all_prompts_share_runs_once_per_update_with_the_same_update(policy, monkeypatch, lora):
    """A system prompt every trained prompt starts with runs once per update, not once per
    distinct prompt, and each distinct prompt once for all the micro-batches its rows fall
    in (one prompt pass); the KV's gradients, gathered over the micro-batches, flow back
    through those passes: the loss, metrics and gradients of prompts run whole."""
    from rlab.engine.policy import kv
    from rlab.engine.policy.lora import LoraSettings, apply_lora

    model = apply_lora(policy.model, LoraSettings(rank=4)) if lora else policy.model
    if lora:  # a new adapter is zero: give it weights, so the start's KV depends on what is trained
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.data.normal_(0, 0.05)
    samples = [_system_sample(policy, question, completion, adv)
               for question in ("12+34=", "7+8=")
               for completion, adv in (("46", 1.0), ("15", -0.5), ("1234", 0.25), ("9", 0.5))]
    # micro-batches of 12 logits rows; a prompt pass of 12 tokens: both prompts, less the start
    monkeypatch.setattr(microbatch_module, "LOGITS_BUDGET_BYTES", 12 * vocab_size(model) * 4)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    config = TrainConfig(lr=1e-2, num_iterations=1, temperature=1.0)
    runs, fewest = {}, kv.MIN_SHARED_PREFIX_TOKENS
    for minimum in (fewest, 10**6):
        model.load_state_dict(start)
        monkeypatch.setattr(kv, "MIN_SHARED_PREFIX_TOKENS", minimum)
        trainer = Trainer(model, policy.pad_id, config)
        prepared = trainer._prepare(samples)
        widths = []
        real = model.forward
        monkeypatch.setattr(model, "forward", lambda *a, **k: widths.append(tuple(k["input_ids"].shape)) or real(*a, **k))
        metrics = trainer.update(samples)
        monkeypatch.setattr(model, "forward", real)
        runs[minimum] = prepared, widths, metrics, [p.grad.clone() for p in model.parameters() if p.grad is not None]
    (shared, shared_widths, shared_metrics, shared_grads), (whole, whole_widths, whole_metrics, whole_grads) = (
        runs.values())
    assert len(shared.chunks) >= 3 and whole.shared_prefix == []
    assert len(shared.shared_prefix) >= fewest
    assert shared_widths[0] == (1, len(shared.shared_prefix))  # the start, once
    # then per prompt pass its distinct prompts (less the start) once, then each of its micro-batches' completions
    assert max(len(chunks) for chunks in shared.passes) > 1
    for prepared, widths in ((shared, shared_widths[1:]), (whole, whole_widths)):
        assert widths == [shape for chunks in prepared.passes for shape in
                          [tuple(chunks[0].prompt_ids.shape)] + [(c.completion_ids.shape[0], c.completion_ids.shape[1] - 1)
                                                                 for c in chunks]]
    assert len(shared.passes) == 1 and shared.passes[0][0].prompt_ids.shape[0] == 2
    for key in ("loss", "entropy", "grad_norm", "clip_ratio"):
        assert shared_metrics[key] == pytest.approx(whole_metrics[key], rel=1e-4, abs=1e-6)
    assert len(shared_grads) == len(whole_grads) > 0
    for got, want in zip(shared_grads, whole_grads):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)


def test_micro_batches_sharing_a_prompt_pass_under_bf16_autocast_make_the_one_pass_update(policy, monkeypatch):
    """Under bf16 autocast (a GPU's or a bf16 CPU's update) the prompt pass's keys, values
    and logits are bf16: several micro-batches read them and send their gradients back
    through one pass, as one micro-batch holding every row does."""
    samples = [_sample(policy, question, completion, adv) for question in ("12+34=", "7+8=")
               for completion, adv in (("46", 1.0), ("15", -0.5), ("1234", 0.25), ("9", 0.5))]
    start = {k: v.clone() for k, v in policy.model.state_dict().items()}
    config = TrainConfig(lr=1e-2, num_iterations=1, temperature=1.0)
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    runs = []
    for budget in (microbatch_module.LOGITS_BUDGET_BYTES, 12 * vocab_size(policy.model) * 4):
        policy.model.load_state_dict(start)
        monkeypatch.setattr(microbatch_module, "LOGITS_BUDGET_BYTES", budget)
        trainer = Trainer(policy.model, policy.pad_id, config, autocast=bf16)
        runs.append((trainer._prepare(samples), trainer.update(samples),
                     [p.grad.clone() for p in policy.model.parameters()]))
    (whole, whole_metrics, whole_grads), (split, split_metrics, split_grads) = runs
    assert len(whole.chunks) == 1 and len(split.passes) == 1 and len(split.chunks) >= 3
    assert split_metrics["loss"] == pytest.approx(whole_metrics["loss"], rel=2e-2, abs=1e-3)
    for got, want in zip(split_grads, whole_grads):
        assert torch.allclose(got, want, rtol=5e-2, atol=5e-3)


def test_truncated_importance_sampling_weights_each_token_and_logs_the_mismatch(policy):
    """Issue 48: a sampler that differs from the policy by known log-prob offsets (a perturbed
    copy): the logged mismatch and importance ratios equal a direct computation, and each token's
    loss is weighted by min(pi_old / pi_sampler, C), truncated at C (Yao et al. 2025)."""
    samples = [_sample(policy, "12+34=", completion, adv) for completion, adv in (("46", 1.0), ("15", -0.5))]
    offsets = [[0.1, -0.2, 2.0], [-1.5, 0.0, 0.3]]  # log pi_old - log pi_sampler, per completion token
    for sample, shift in zip(samples, offsets):
        sample.old_logprobs = [lp - d for lp, d in zip(sample.old_logprobs, shift)]  # the sampler's
    metrics = Trainer(policy.model, policy.pad_id, TrainConfig(lr=1e-9, num_iterations=1, is_cap=3.0)).step(samples)
    flat = np.array([d for shift in offsets for d in shift])
    weights = np.minimum(np.exp(flat), 3.0)  # exp(2.0) = 7.39 is truncated at 3
    assert metrics["sampling/sampling_logp_difference/mean"] == pytest.approx(np.abs(flat).mean(), abs=1e-5)
    assert metrics["sampling/sampling_logp_difference/max"] == pytest.approx(2.0, abs=1e-5)
    assert metrics["sampling/importance_sampling_ratio/max"] == pytest.approx(3.0)
    assert metrics["sampling/importance_sampling_ratio/min"] == pytest.approx(np.exp(-1.5), rel=1e-4)
    assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(weights.mean(), rel=1e-4)
    # the first update's ratio is 1 (its old log-probs are its own): the loss is -mean(w * A) over the tokens
    advantages = np.array([1.0] * 3 + [-0.5] * 3)
    assert metrics["loss"] == pytest.approx(-(weights * advantages).mean(), rel=1e-4)
    # each sample is handed back the policy's own log-probs: the sampler's plus the offsets
    for sample, shift in zip(samples, offsets):
        assert sample.policy_logprobs == pytest.approx([lp + d for lp, d in zip(sample.old_logprobs, shift)], abs=1e-5)
    # the correction off: the mismatch is measured (the A/B of the correction), no weight is applied
    uncorrected = Trainer(policy.model, policy.pad_id, TrainConfig(lr=1e-9, num_iterations=1)).step(samples)
    assert uncorrected["sampling/sampling_logp_difference/mean"] == pytest.approx(np.abs(flat).mean(), abs=1e-5)
    assert not any(k.startswith("sampling/importance_sampling_ratio") for k in uncorrected)
    ratio = np.exp(flat)  # pi / pi_sampler: PPO's clipped surrogate against the sampler
    surrogate = np.minimum(ratio * advantages, np.clip(ratio, 0.8, 1.2) * advantages)
    assert uncorrected["loss"] == pytest.approx(-surrogate.mean(), rel=1e-4)


def test_a_run_stores_the_trained_policys_log_probs_beside_the_samplers(tmp_path):
    """Issue 48: each trained single-turn trajectory keeps the trainer's log-probs of its tokens
    (schema v13), token for token with the sampler's: here the sampler is the policy itself
    (the shipped tiny policy: float32, no LoRA), so they agree to float16's rounding; a
    group without reward spread trains nothing and keeps none."""
    from rlab.engine.run.config import RunConfig
    from rlab.engine.step import run
    from rlab.store.reader import StoreReader
    from rlab.store.tokens import unpack_logprobs

    db = tmp_path / "m.db"
    run(RunConfig(db=db, prompts_per_step=4, group_size=4, eval_size=4, max_steps=2))
    with StoreReader(db) as reader:
        run_id = reader.runs()[0]["id"]
        trajectories = [t for step in (1, 2) for g in reader.groups_of_step(run_id, step)
                        for t in reader.group(g["id"])["trajectories"]]
    measured = [t for t in trajectories if t["token_policy_logprobs"] is not None]
    assert measured and all(t["advantage"] != 0 for t in measured)
    assert all(t["token_policy_logprobs"] is None for t in trajectories if t["advantage"] == 0)
    for t in measured:
        policy, sampled = unpack_logprobs(t["token_policy_logprobs"]), unpack_logprobs(t["token_logprobs"])
        assert len(policy) == len(sampled) == t["completion_tokens"]
        assert np.allclose(policy, sampled, atol=0.02)
