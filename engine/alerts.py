"""The run's watch: alerts computed from step metrics and group stats, by the engine.

The engine feeds an :class:`AlertWatch` every step (``engine.step``), stores
each alert as an ``alert`` event (so a headless run on a GPU box has them,
and ``rlab watch`` / ``rlab runs`` show them), prints it, and pauses the run
on the kinds named in ``pause_on``. The module is pure Python, so the TUI
can replay stored steps under other thresholds (``rlab watch --alert``).

The alerts ("watch your rollouts, don't blindly trust the reward function"):

- ``reward_jump``: mean reward jumps after a plateau.
- ``perfect_share``: a suspicious share of perfect scores in one step.
- ``length_drift``: mean completion length drifts away from its early level.
- ``diversity_drop``: distinct-n within the unsolved groups falls. A group whose
  every trajectory solved the task (its declared success) is left out: eight
  copies of the one right answer are a task learned, not a collapse (the
  default arithmetic run raised it twice while its pass@1 rose to 0.84).
- ``judge_disagreement``: the judge ranks a group against the verifier (Kendall's
  tau-b below ``min_rank_corr``, the statistic of the ``judge/tau`` metric).
- ``collapse``: held-out pass@1 falls well below its best (and by more than
  twice the standard error of a difference of two pass@1 on
  ``eval/num_examples`` examples, so a small eval's noise is not a fall), or for several
  steps most groups' completions are identical (or the policy's entropy is
  near 0) while the success rate (its mean over the last ``window`` steps)
  is well below its best such mean: the policy stopped exploring while
  failing (a learning rate that destroys the model).
- ``no_signal``: almost every group has no reward spread for many steps, so
  GRPO-family advantages are 0 and nothing is being trained.
- ``hack``: the total reward rises while the success rate (the task's
  declared success function, ``engine.success``) stays flat or falls.

And for agents (a tool task's steps, ``store.stepstats.tool_stats``):

- ``tool_loop``: many episodes call tools until the turn limit and never answer;
- ``tool_errors``: the share of failed tool calls rises above its early level;
- ``tool_abandon``: the policy stops calling its tools while the success rate
  falls (it unlearned the tool, or found an answer the reward takes without it),
  or stays at 0 (calling never paid: a policy that cannot use its tools yet);
- ``tool_paid``: at the same success verdict, the reward rises with the number
  of calls: the rubric pays for calling, not for what the call achieved (a
  reward per call), whether or not the policy has found the loop yet.

And for a sampler that is not the trained weights (a bf16 or merged copy, vLLM):

- ``sampler_mismatch``: the mean |log pi_old - log pi_sampler| of the trained
  tokens (``sampling/sampling_logp_difference/mean``, logged by the truncated
  importance-sampling correction) passes a threshold: the samples come from
  another distribution than the one trained, the instability Yao et al. 2025 trace
  to it (a stale adapter on the server, a precision the model does not survive).

Every alert is edge-triggered: it fires on the step where its condition
becomes true, not again while it stays true, nor until it has been false for
``window`` steps, so a long run (or a value hovering at its threshold) does
not drown the panel. Memory is bounded: the watch keeps only sliding windows of steps.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from rlab.engine.alert_inputs import GroupStats, distinct_n
from rlab.engine.alert_thresholds import AlertThresholds
from rlab.engine.rewards.judge.agreement import kendall_tau

def _perfect_verdict(groups: list[GroupStats], perfect: float) -> str:
    """What the success verdicts say of the perfect rewards: a task nearly learned
    (they solved it: little reward spread is left) or a rubric paying for
    something else; "" where the trajectories carry no verdicts."""
    verdicts = [ok for g in groups for r, ok in zip(g.rewards, g.successes) if r >= perfect and ok is not None]
    if not verdicts:
        return ""
    solved = sum(verdicts) / len(verdicts)
    if solved >= 0.9:
        return f", and {solved:.0%} of those solved the task: few groups keep a reward spread to learn from"
    return f", but only {solved:.0%} of those solved the task: the rubric pays for something else"


@dataclass(frozen=True)
class Alert:
    """One alert: its kind, the step that raised it, a sentence, the groups to open.

    ``action`` is ``"pause"`` when the run pauses on it, else ``"warn"``.
    """

    kind: str
    step: int
    message: str
    group_ids: tuple[int, ...] = ()
    value: float | None = None
    action: str = "warn"

    def payload(self) -> dict[str, Any]:
        """The ``alert`` event's payload (``alert`` is the kind)."""
        return {"alert": self.kind, "message": self.message, "group_ids": list(self.group_ids),
                "value": self.value, "action": self.action}

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Alert:
        """The alert of a stored ``alert`` event (``{"step", "payload"}``)."""
        payload = event.get("payload") or {}
        return cls(str(payload.get("alert")), int(event.get("step") or 0), str(payload.get("message", "")),
                   tuple(payload.get("group_ids") or ()), payload.get("value"), str(payload.get("action", "warn")))

    def line(self) -> str:
        """One line for a log or a terminal: step, kind, message and what the run did."""
        did = "; the run paused" if self.action == "pause" else ""
        groups = f" (groups {', '.join(map(str, self.group_ids[:5]))})" if self.group_ids else ""
        return f"alert at step {self.step}: {self.kind}: {self.message}{groups}{did}"


class AlertWatch:
    """Stateful, edge-triggered alert detector; feed it steps in order.

    Call :meth:`observe` once per step with the step's metrics row (TRL names:
    ``reward``, ``completions/mean_length``, ``frac_reward_zero_std``,
    ``entropy``; the lab's ``success_rate`` and ``eval/pass_at_1``) and the
    step's groups. State is sliding windows of ``thresholds.window`` steps
    plus the early baselines and the best success so far, so memory does not
    grow with the run.

    Args:
        thresholds: the thresholds and ``pause_on`` (default: the defaults).
        reward_scale: the rubric's total positive weight, the most reward a
            trajectory can earn (hack compares the reward's rise divided by
            it with the success rate's rise); 1.0 when unknown.
    """

    def __init__(self, thresholds: AlertThresholds | None = None, reward_scale: float = 1.0) -> None:
        self.thresholds = thresholds or AlertThresholds()
        self.reward_scale = reward_scale
        self._rewards: deque[float] = deque(maxlen=self.thresholds.window)
        self._early_length: list[float] = []
        self._early_distinct: list[float] = []
        self._trend: deque[tuple[float, float]] = deque(maxlen=self.thresholds.window)
        self._best_eval: tuple[float, int] | None = None
        self._eval_fall: Alert | None = None  # the last held-out eval's verdict, held until the next eval
        self._best_success = 0.0
        self._success: deque[float] = deque(maxlen=self.thresholds.window)
        self._failing_deterministic = 0
        self._no_signal = 0
        self._early_tool_errors: list[float] = []
        self._tool_trend: deque[tuple[float, float]] = deque(maxlen=self.thresholds.window)
        self._paid: deque[list[_Paid]] = deque(maxlen=self.thresholds.window)
        self._active: set[str] = set()
        self._quiet: dict[str, int] = {}
        self.last_step: int | None = None

    def retune(self, thresholds: AlertThresholds) -> None:
        """Judge the next steps by ``thresholds`` (``rlab set RUN alert.NAME=VALUE``).

        The history stays: the windows keep their newest steps (cut or grown
        to the new ``window``), the early baselines and the best success so far.
        """
        self.thresholds = thresholds
        self._rewards = deque(self._rewards, maxlen=thresholds.window)
        self._trend = deque(self._trend, maxlen=thresholds.window)
        self._tool_trend = deque(self._tool_trend, maxlen=thresholds.window)
        self._paid = deque(self._paid, maxlen=thresholds.window)
        self._success = deque(self._success, maxlen=thresholds.window)

    def observe(self, step: int, metrics: dict, groups: list[GroupStats]) -> list[Alert]:
        """Check one step; return the alerts that start at this step.

        Raises ValueError when steps are fed out of order (each step once,
        increasing), since the plateau window and baselines depend on order.
        """
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"steps must increase: got {step} after {self.last_step}")
        self.last_step = step
        found = [
            self._reward_jump(step, metrics.get("reward")),
            self._perfect_share(step, groups),
            self._length_drift(step, metrics.get("completions/mean_length"), groups),
            self._diversity_drop(step, groups),
            self._judge_disagreement(step, groups),
            self._collapse(step, metrics, groups),
            self._no_signal_alert(step, metrics.get("frac_reward_zero_std")),
            self._hack(step, metrics.get("reward"), metrics.get("success_rate")),
            self._tool_loop(step, metrics.get("tools/loop_share"), groups),
            self._tool_errors(step, metrics.get("tools/error_share"), groups),
            self._tool_abandon(step, metrics.get("tools/use_rate"), metrics.get("success_rate")),
            self._tool_paid(step, groups),
            self._sampler_mismatch(step, metrics.get("sampling/sampling_logp_difference/mean"),
                                   metrics.get("sampling/importance_sampling_ratio/min")),
        ]
        fired = []
        for kind, alert in found:
            if alert is None:
                # re-armed only after `window` quiet steps, so a value that
                # hovers around its threshold does not fire every other step
                self._quiet[kind] = self._quiet.get(kind, 0) + 1
                if self._quiet[kind] >= self.thresholds.window:
                    self._active.discard(kind)
                continue
            self._quiet[kind] = 0
            if kind not in self._active:
                self._active.add(kind)
                action = "pause" if kind in self.thresholds.pause_on else "warn"
                fired.append(Alert(alert.kind, alert.step, alert.message, alert.group_ids, alert.value, action))
        return fired

    def _reward_jump(self, step: int, reward: float | None) -> tuple[str, Alert | None]:
        kind, th, window = "reward_jump", self.thresholds, self._rewards
        if reward is None:
            return kind, None
        alert = None
        if len(window) == window.maxlen and max(window) - min(window) <= th.plateau_range:
            base = fmean(window)
            if reward - base >= th.jump:
                alert = Alert(kind, step, f"mean reward jumped {base:.2f} -> {reward:.2f} after a "
                              f"{len(window)}-step plateau", value=reward - base)
        window.append(reward)
        return kind, alert

    def _perfect_share(self, step: int, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        kind, th = "perfect_share", self.thresholds
        rewards = [r for g in groups for r in g.rewards]
        if not rewards:
            return kind, None
        share = sum(r >= th.perfect_reward for r in rewards) / len(rewards)
        if share < th.perfect_share:
            return kind, None
        ids = tuple(g.group_id for g in groups if all(r >= th.perfect_reward for r in g.rewards))
        message = f"{share:.0%} of rewards are perfect (>= {th.perfect_reward:g})"
        return kind, Alert(kind, step, message + _perfect_verdict(groups, th.perfect_reward), ids, share)

    def _length_drift(self, step: int, length: float | None,
                      groups: list[GroupStats]) -> tuple[str, Alert | None]:
        kind, th = "length_drift", self.thresholds
        if length is None:
            return kind, None
        if len(self._early_length) < th.window:
            self._early_length.append(length)
            return kind, None
        base = fmean(self._early_length)
        change = (length - base) / base if base > 0 else 0.0
        if abs(change) < th.length_drift:
            return kind, None
        # Open the groups that drifted most: longest completions for a rise, shortest for a fall.
        mean_chars = {g.group_id: fmean(map(len, g.completions)) for g in groups if g.completions}
        ids = tuple(sorted(mean_chars, key=mean_chars.__getitem__, reverse=change > 0)[:5])
        return kind, Alert(kind, step, f"completion length {base:.1f} -> {length:.1f} tokens "
                           f"({change:+.0%})", ids, change)

    def _diversity_drop(self, step: int, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        kind, th = "diversity_drop", self.thresholds
        per_group = {g.group_id: distinct_n(g.completions, th.distinct_n) for g in groups if not g.solved}
        if not per_group:
            return kind, None
        mean = fmean(per_group.values())
        if len(self._early_distinct) < th.window:
            self._early_distinct.append(mean)
            return kind, None
        base = fmean(self._early_distinct)
        if base <= 0 or (base - mean) / base < th.diversity_drop:
            return kind, None
        ids = tuple(sorted(per_group, key=per_group.__getitem__)[:5])
        return kind, Alert(kind, step, f"distinct-{th.distinct_n} within unsolved groups fell "
                           f"{base:.2f} -> {mean:.2f}", ids, mean)

    def _judge_disagreement(self, step: int, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        kind, th = "judge_disagreement", self.thresholds
        judged, disagree = 0, []
        for g in groups:
            if not g.judge_scores or any(s is None for s in g.judge_scores):
                continue
            tau = kendall_tau(g.rewards, [float(s) for s in g.judge_scores if s is not None])
            if tau is None:
                continue
            judged += 1
            if tau < th.min_rank_corr:
                disagree.append(g.group_id)
        if not judged or len(disagree) / judged < th.disagreement_share:
            return kind, None
        return kind, Alert(kind, step, f"judge and verifier disagree on {len(disagree)}/{judged} "
                           f"judged groups (Kendall tau-b < {th.min_rank_corr:g})",
                           tuple(disagree), len(disagree) / judged)

    def _collapse(self, step: int, metrics: dict, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        """Held-out pass@1 well below its best, or a deterministic policy failing for several steps."""
        kind, th = "collapse", self.thresholds
        held_out = _finite(metrics.get("eval/pass_at_1"))
        if held_out is not None:
            self._eval_fall = None
            size = _finite(metrics.get("eval/num_examples"))
            if self._best_eval is not None and held_out <= self._best_eval[0] - _fall(
                    th.collapse_drop, self._best_eval[0], held_out, size):
                best, at = self._best_eval
                self._eval_fall = Alert(kind, step, f"held-out pass@1 fell from {best:.2f} (step {at}) to "
                                        f"{held_out:.2f}", value=held_out)
            elif self._best_eval is None or held_out > self._best_eval[0]:
                self._best_eval = (held_out, step)
        if self._eval_fall is not None:
            return kind, self._eval_fall
        success = _finite(metrics.get("success_rate"))
        identical = [g.group_id for g in groups if g.identical]
        texts = [text for g in groups for text in g.completions]
        mode, mode_count = Counter(texts).most_common(1)[0] if texts else ("", 0)
        entropy = _finite(metrics.get("entropy"))
        deterministic = (bool(groups) and (len(identical) >= th.collapse_share * len(groups)
                                           or mode_count >= th.collapse_share * len(texts))
                         or (entropy is not None and entropy <= th.collapse_entropy))
        # The success rate over the window's last steps, not one step's: a step of P groups is a
        # noisy sample (16 groups of a tool task swung 0.33-0.77 around 0.55), and a best taken
        # from one lucky step made a healthy run "fall" by 0.2.
        if success is not None:
            self._success.append(success)
            success = fmean(self._success)
        failing = success is not None and success <= self._best_success - th.collapse_drop
        self._failing_deterministic = self._failing_deterministic + 1 if deterministic and failing else 0
        if success is not None:
            self._best_success = max(self._best_success, success)
        if self._failing_deterministic < th.collapse_steps or success is None:
            return kind, None
        return kind, Alert(kind, step, f"for {self._failing_deterministic} steps the policy has been near "
                           f"deterministic ({len(identical)}/{len(groups)} groups one identical completion, "
                           f"{mode_count}/{len(texts)} completions {mode[:40]!r}, entropy {_shown(entropy)}) while "
                           f"the success rate (mean of the last {len(self._success)} steps) fell to {success:.2f} "
                           f"from {self._best_success:.2f}",
                           tuple(identical[:5]), success)

    def _no_signal_alert(self, step: int, zero_std: float | None) -> tuple[str, Alert | None]:
        """Nearly every group without reward spread for many steps: nothing is trained."""
        kind, th = "no_signal", self.thresholds
        share = _finite(zero_std)
        self._no_signal = self._no_signal + 1 if share is not None and share >= th.no_signal_share else 0
        if self._no_signal < th.no_signal_steps:
            return kind, None
        return kind, Alert(kind, step, f"{share:.0%} of groups had no reward spread for {self._no_signal} steps: "
                           "their advantages are 0, so nothing is being trained (solved, collapsed, or a reward "
                           "that cannot tell completions apart)", value=share)

    def _hack(self, step: int, reward: float | None, success: float | None) -> tuple[str, Alert | None]:
        """Over the window, the reward (per unit of rubric weight) rose while success did not follow."""
        kind, th = "hack", self.thresholds
        reward, success = _finite(reward), _finite(success)
        if reward is None or success is None:
            return kind, None
        self._trend.append((reward, success))
        if len(self._trend) < self._trend.maxlen:  # type: ignore[operator]
            return kind, None
        half = len(self._trend) // 2
        early, late = list(self._trend)[:half], list(self._trend)[-half:]
        reward_rise = fmean(r for r, _ in late) - fmean(r for r, _ in early)
        success_rise = fmean(s for _, s in late) - fmean(s for _, s in early)
        if reward_rise <= 0 or reward_rise / self.reward_scale - success_rise < th.hack_gap:
            return kind, None
        return kind, Alert(kind, step, f"mean reward rose {reward_rise:+.2f} over {len(self._trend)} steps while the "
                           f"success rate moved {success_rise:+.2f}: the policy is paid for something that does "
                           "not solve the task", value=reward_rise / self.reward_scale - success_rise)


    def _tool_loop(self, step: int, share: float | None, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        """Many episodes called tools until the turn limit, never answering."""
        kind, th = "tool_loop", self.thresholds
        share = _finite(share)
        if share is None or share < th.tool_loop_share:
            return kind, None
        looping = {g.group_id: sum(g.looped) for g in groups if any(g.looped)}
        ids = tuple(sorted(looping, key=looping.__getitem__, reverse=True)[:5])
        return kind, Alert(kind, step, f"{share:.0%} of episodes called tools until the turn limit without "
                           "answering: a loop of calls (a reward that pays per call, or a tool whose answer "
                           "never settles the question)", ids, share)

    def _tool_errors(self, step: int, share: float | None, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        """The share of failed tool calls rose above its early level."""
        kind, th = "tool_errors", self.thresholds
        share = _finite(share)
        if share is None:
            return kind, None
        if len(self._early_tool_errors) < th.window:
            self._early_tool_errors.append(share)
            return kind, None
        base = fmean(self._early_tool_errors)
        if share - base < th.tool_error_rise:
            return kind, None
        failing = {g.group_id: sum(g.tool_errors) for g in groups if any(g.tool_errors)}
        ids = tuple(sorted(failing, key=failing.__getitem__, reverse=True)[:5])
        return kind, Alert(kind, step, f"the share of failed tool calls rose {base:.0%} -> {share:.0%}: calls "
                           "malformed, to unknown tools, with bad arguments, or tools failing (open the groups "
                           "to read the errors)", ids, share)

    def _tool_abandon(self, step: int, use: float | None, success: float | None) -> tuple[str, Alert | None]:
        """Over the window, tool use fell while the success rate fell too."""
        kind, th = "tool_abandon", self.thresholds
        use, success = _finite(use), _finite(success)
        if use is None or success is None:
            return kind, None
        self._tool_trend.append((use, success))
        if len(self._tool_trend) < self._tool_trend.maxlen:  # type: ignore[operator]
            return kind, None
        half = len(self._tool_trend) // 2
        early, late = list(self._tool_trend)[:half], list(self._tool_trend)[-half:]
        early_use = fmean(u for u, _ in early)
        use_fall = early_use - fmean(u for u, _ in late)
        success_fall = fmean(s for _, s in early) - fmean(s for _, s in late)
        # a policy that never succeeded cannot lose success: its use halving (from 0.1 up) is the whole sign
        never = all(s == 0 for _, s in self._tool_trend)
        if not (never and early_use >= 0.1 and use_fall >= early_use / 2) and (
                use_fall < th.tool_drop or success_fall < th.tool_success_drop):
            return kind, None
        why = ("no trajectory succeeded: calling never paid, so RL unlearns it; warm-start the policy on more "
               "transcripts that call the tools" if never else
               f"the success rate fell {success_fall:.2f}: it is answering without them")
        return kind, Alert(kind, step, f"over {len(self._tool_trend)} steps the policy stopped calling its tools "
                           f"(its use rate fell {use_fall:.2f}) while {why}", value=use_fall)

    def _tool_paid(self, step: int, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        """Over the window, the reward per extra call at the same success verdict (a pooled
        within-verdict least-squares slope) is a share of the rubric's scale, and more than
        twice its standard error."""
        kind, th = "tool_paid", self.thresholds
        self._paid.append([_Paid(g.group_id, c, r, ok) for g in groups if len(g.tool_calls) == len(g.rewards)
                           == len(g.successes) for c, r, ok in zip(g.tool_calls, g.rewards, g.successes)
                           if ok is not None])
        fit = _per_call([p for seen in self._paid for p in seen])
        if fit is None or fit.spread < th.tool_paid_spread:
            return kind, None
        slope, error = fit.slope, fit.error
        if slope / self.reward_scale < th.tool_paid or slope <= 2 * error:
            return kind, None
        # Open the groups where a failing trajectory earned most: the hole, paid.
        failed: dict[int, float] = {}
        for p in self._paid[-1]:
            if not p.success:
                failed[p.group_id] = max(failed.get(p.group_id, p.reward), p.reward)
        ids = tuple(sorted(failed, key=failed.__getitem__, reverse=True)[:5])
        return kind, Alert(kind, step, f"at the same success verdict each tool call adds {slope:+.2f} reward "
                           f"({slope / self.reward_scale:.0%} of the rubric's total, +/- {error:.2f}) over "
                           f"{fit.count} trajectories of {sum(map(bool, self._paid))} steps: the rubric pays for "
                           "calling, not for what the call achieved, so a policy that finds it will call until "
                           "the turn limit (fix the rubric and fork; a rubric meant to pay for lookups: raise "
                           "alert.tool_paid)", ids, slope / self.reward_scale)


    def _sampler_mismatch(self, step: int, mean: float | None, w_min: float | None) -> tuple[str, Alert | None]:
        """The sampler's log-probs drifted from the trained policy's past the threshold."""
        kind, th = "sampler_mismatch", self.thresholds
        mean = _finite(mean)
        if mean is None or mean < th.sampler_mismatch:
            return kind, None
        low = f"; the lowest importance weight was {w_min:.3f}" if _finite(w_min) is not None else ""
        return kind, Alert(kind, step, f"the sampler's log-probs differ from the trained policy's by {mean:.3f} "
                           f"nats a token on average (threshold {th.sampler_mismatch:g}){low}: the samples come from "
                           "another distribution than the one trained (a stale adapter on the server, or a precision "
                           "the model does not survive); the update's truncated importance weights correct for part "
                           "of it", value=mean)


@dataclass(frozen=True)
class _Paid:
    """One tool trajectory as ``tool_paid`` pools it: its group, calls, reward and success verdict."""

    group_id: int
    calls: int
    reward: float
    success: bool


@dataclass(frozen=True)
class _Slope:
    """A least-squares slope of reward on calls, its standard error, the sum of squared
    deviations of the calls (``spread``) and the number of points."""

    slope: float
    error: float
    spread: float
    count: int


def _per_call(points: list[_Paid]) -> _Slope | None:
    """Reward on calls, fitted with one intercept per success verdict (a pooled within-group
    regression, the fixed-effects estimator: Wooldridge, "Introductory Econometrics", 14.1), so a
    call that leads to success is not counted as paid. Its standard error is
    sqrt(s^2 / spread), s^2 the residual variance on n - 1 - (verdicts) degrees of freedom.
    None when fewer than 4 points or the calls do not vary within a verdict."""
    centred: list[tuple[float, float]] = []
    verdicts = 0
    for verdict in (True, False):
        same = [p for p in points if p.success is verdict]
        if len(same) < 2:
            continue
        verdicts += 1
        calls, reward = fmean(p.calls for p in same), fmean(p.reward for p in same)
        centred += [(p.calls - calls, p.reward - reward) for p in same]
    spread = sum(c * c for c, _ in centred)
    if len(centred) < 4 or spread == 0:
        return None
    slope = sum(c * r for c, r in centred) / spread
    residual = sum((r - slope * c) ** 2 for c, r in centred) / (len(centred) - 1 - verdicts)
    return _Slope(slope, math.sqrt(residual / spread), spread, len(centred))


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None (a metric not logged, or nan)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _fall(drop: float, best: float, now: float, size: float | None) -> float:
    """How far held-out pass@1 must fall below ``best`` to count: ``drop``, and on ``size``
    examples at least twice the standard error of the difference of two independent pass@1,
    2 * sqrt(2 p (1 - p) / n) with p their mean (the two-proportion z-test, z = 2): on 64
    examples near p = 0.3 that is 0.16, under the default 0.2; on 8 it is 0.46."""
    if size is None or size < 1:
        return drop
    p = (best + now) / 2
    return max(drop, 2 * math.sqrt(2 * p * (1 - p) / size))


def _shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
