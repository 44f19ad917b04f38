"""``judge_disagreement``: the judge ranks a group against the verifier (Kendall's tau-b
below ``min_rank_corr``, the statistic of the ``judge/tau`` metric)."""

from __future__ import annotations

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView
from rlab.engine.rewards.judge.agreement import kendall_tau


class Settings(Shared):
    """The rank correlation that is disagreement, and the share of groups that must disagree."""

    min_rank_corr: float = Field(0.0, ge=-1, le=1, description=(
        "Kendall tau-b(judge, verifier) of a group below this is disagreement (the statistic of judge/tau)."))
    disagreement_share: float = Field(0.5, gt=0, le=1, description="Share of judged groups of a step that must disagree.")


class JudgeDisagreement(AlertCheck[Settings]):
    """``disagreement_share`` of a step's judged groups rank against the verifier."""

    kind = "judge_disagreement"
    fires_when = ("the judge ranks `disagreement_share` of the judged groups against the verifier: a group's "
                  "Kendall tau-b (judge vs verifier, the statistic of the `judge/tau` metric) below "
                  "`min_rank_corr`. Before 2026-11-27 this was Spearman's rho; at the default 0 the two agree on "
                  "the sign, but above 0 tau-b runs lower (about two thirds of rho), so a threshold set for rho "
                  "fires sooner now")

    def check(self, view: StepView) -> Alert | None:
        th = self.settings
        judged, disagree = 0, []
        for g in view.groups:
            if not g.judge_scores or any(s is None for s in g.judge_scores):
                continue
            tau = kendall_tau(g.rewards, [float(s) for s in g.judge_scores if s is not None])
            if tau is None:
                continue
            judged += 1
            if tau < th.min_rank_corr:
                disagree.append(g.group_id)
        if not judged or len(disagree) / judged < th.disagreement_share:
            return None
        return self.alert(view, f"judge and verifier disagree on {len(disagree)}/{judged} judged groups "
                          f"(Kendall tau-b < {th.min_rank_corr:g})", disagree, len(disagree) / judged)
