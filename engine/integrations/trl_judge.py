"""A RULER judge as one more reward function of a GRPOTrainer.

RULER ranks a whole group in one call, but TRL hands each process only its
share of the generation batch, and a group may be split over processes. So
:class:`JudgeReward` gathers every process's completions to the main
process (the trainer's process group), which cuts the batch into groups
(consecutive completions of one prompt, as TRL's sampler lays them out),
asks the judge once per group (``engine.rewards.judge.ruler.RulerJudge``,
concurrently), and broadcasts the scores back; each process returns its
own slice. Only the main process talks to the judge server, and it keeps
each call's result so the attachment stores the calls in the run file
(``judge_calls``), the scores and ranks on the trajectories and a failed
group as ``failed`` (with a ``judge_failed`` event), as the lab's own runs
do. A failed group's completions get ``None`` from the judge (TRL leaves
the judge out of their weighted sum), never a made-up score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlab.engine.run.config import JudgeSettings
from rlab.engine.integrations.trl_ranks import Ranks
from rlab.engine.integrations.trl_rewards import completion_text
from rlab.engine.rewards.judge.ruler import JudgeResult, RulerJudge

#: The judge's column in TRL's logs and in the run file's components.
JUDGE_NAME = "ruler"


@dataclass
class JudgedBatch:
    """The judge's verdict on one generation batch (main process).

    ``keys``: each row's prompt (``repr``), to match the batch the
    attachment stores; ``spans``: (first row, row count) of each group in
    the gathered batch; ``results``: one :class:`JudgeResult` per group,
    same order.
    """

    keys: list[str]
    spans: list[tuple[int, int]]
    results: list[JudgeResult]

    def at(self, row: int) -> tuple[JudgeResult, int] | None:
        """The group result covering ``row`` and the row's position in it."""
        for (start, size), result in zip(self.spans, self.results):
            if start <= row < start + size:
                return result, row - start
        return None


def conversation(prompt: Any, completion: Any) -> list[dict]:
    """One trajectory as the judge reads it: the prompt's messages, then the completion's."""
    head = prompt if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    tail = (completion if isinstance(completion, list)
            else [{"role": "assistant", "content": completion_text(completion)}])
    return [*head, *tail]


class JudgeReward:
    """A TRL reward function ``f(prompts, completions, **kwargs)`` that asks a
    RULER judge on the main process (see the module doc).

    Args:
        settings: the judge (model, base_url, retries, time-out, price, cache).
        ranks: the trainer's processes.
        rubric: the judge's grading text (None: RULER's default).
        judge: a ready judge (tests); built from ``settings`` on the main
            process otherwise.
        group_size: completions per group (TRL's ``num_generations``), so two
            groups in a row with one prompt text are judged apart.

    Attributes:
        last: the main process's verdict on the latest batch (None before,
            and on other processes); the attachment takes it when it stores the step.
    """

    __name__ = JUDGE_NAME

    def __init__(self, settings: JudgeSettings, ranks: Ranks, *, rubric: str | None = None,
                 judge: RulerJudge | None = None, group_size: int | None = None) -> None:
        self.settings = settings
        self.ranks = ranks
        self.group_size = group_size
        self.judge = judge if judge is not None else (
            RulerJudge.from_settings(settings, rubric) if ranks.is_main else None)
        self.last: JudgedBatch | None = None

    def __call__(self, prompts: list | None = None, completions: list | None = None,
                 **kwargs: Any) -> list[float | None]:
        prompts, completions = list(prompts or []), list(completions or [])
        rows = self.ranks.gather([(repr(p), conversation(p, c)) for p, c in zip(prompts, completions)])
        counts = self.ranks.gather([len(completions)])
        scores: list[float | None] | None = None
        if self.ranks.is_main:
            scores = self._judge(rows)
        scores = self.ranks.broadcast(scores)
        start = sum(counts[:self.ranks.index])
        return list(scores[start:start + len(completions)])

    def _judge(self, rows: list[tuple[str, list[dict]]]) -> list[float | None]:
        """Ask the judge about every group of the gathered batch; one score (or None) per row."""
        assert self.judge is not None
        spans: list[tuple[int, int]] = []
        size = self.group_size or len(rows)
        for i, (key, _) in enumerate(rows):
            if spans and rows[spans[-1][0]][0] == key and spans[-1][1] < size:
                spans[-1] = (spans[-1][0], spans[-1][1] + 1)
            else:
                spans.append((i, 1))
        groups = [[rows[i][1] for i in range(start, start + size)] for start, size in spans]
        results = self.judge.score_groups_sync(groups) if groups else []
        self.last = JudgedBatch([key for key, _ in rows], spans, results)
        scores: list[float | None] = []
        for result, (_, size) in zip(results, spans):
            scores.extend(result.scores if result.scores is not None else [None] * size)
        return scores

    def close(self) -> None:
        """Close the judge's HTTP client and loop."""
        if self.judge is not None:
            self.judge.close()
