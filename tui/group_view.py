"""Group view (``g``): a group's trajectories side by side, one column each."""

from __future__ import annotations

from rich.console import Group as RichGroup
from rich.rule import Rule
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import var
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header, Static

from rlab.engine.cli.formatting import call_line, clip, fmt, message_call_line
from rlab.tui.view import NavScreen, View

SORTS = ("index", "reward", "judge rank")
"""Column orders offered by ``s``: as sampled, by verifier reward (best
first), by the judge's rank (1 first)."""


def judge_line(group: dict) -> str:
    """The judge's part of the group title: status, then the call's seconds,
    tokens (prompt + completion) and how it asked for JSON; the error last."""
    line = group.get("judge_status") or "no judge"
    call = group.get("judge_call")
    if call:
        if call.get("latency_s") is not None:
            line += f" · {call['latency_s']:.1f} s"
        line += f" · {call['prompt_tokens']}+{call['completion_tokens']} tokens"
        if call.get("response_mode"):
            line += f" · {call['response_mode']}"
        if (call.get("attempts") or 0) > 1:
            line += f" · {call['attempts']} attempts"
    if group.get("judge_error"):
        line += f" ({clip(group['judge_error'], 60)})"
    return line


def sort_trajectories(trajs: list[dict], how: str) -> list[dict]:
    """The group's trajectories in display order (see :data:`SORTS`).

    Missing rewards sort last; missing judge ranks sort last.
    Raises ValueError for an unknown ``how``.
    """
    if how == "index":
        return sorted(trajs, key=lambda t: t["idx"])
    if how == "reward":
        return sorted(trajs, key=lambda t: (t["reward"] is None, -(t["reward"] or 0.0), t["idx"]))
    if how == "judge rank":
        return sorted(trajs, key=lambda t: (t.get("judge_rank") is None, t.get("judge_rank") or 0,
                                            t["idx"]))
    raise ValueError(f"unknown sort {how!r}; use one of {SORTS}")


def last_turns(traj: dict, count: int = 4) -> list[dict]:
    """The episode's last ``count`` messages after the prompt (multi-step), or
    the completion as one assistant message (single turn)."""
    messages = [m for m in traj.get("messages") or [] if m.get("role") != "system"]
    if len(messages) > 2:
        return messages[-count:]
    return [{"role": "assistant", "content": traj.get("completion") or ""}]


def column_text(traj: dict, selected: bool) -> RichGroup:
    """The rich text of one trajectory's column."""
    head = Text(f"#{traj['idx']}  reward {fmt(traj['reward'])}", style="bold reverse" if selected
                else "bold")
    lines = [head]
    components = traj.get("components") or {}
    if components:
        lines.append(Text("  ".join(f"{k}={fmt(v)}" for k, v in components.items()), style="dim"))
    if traj.get("judge_score") is not None:
        lines.append(Text(f"judge {fmt(traj['judge_score'])} · rank {traj.get('judge_rank') or '-'}",
                          style="yellow"))
    advantage = traj.get("advantage")
    lines.append(Text(f"A {fmt(advantage, '+.3f')}",
                      style="green" if (advantage or 0) > 0 else "red" if (advantage or 0) < 0 else ""))
    status = traj.get("parse_status")
    if status:
        lines.append(Text(f"parse: {status}" + (" · truncated" if traj.get("truncated") else ""),
                          style="dim"))
    calls = traj.get("calls") or []
    if traj.get("tool_calls") is not None:
        lines.append(Text(f"calls: {len(calls)}", style="bold magenta"))
        for call in calls:
            shown = f"✗ {clip(call['error'], 40)}" if call.get("error") is not None else f"→ {clip(call['result'], 24)}"
            lines.append(Text(f" t{call['turn']} {clip(call_line(call['name'], call['arguments']), 30)} {shown}",
                              style="red" if call.get("error") is not None else "magenta"))
    lines.append(Rule(style="dim"))
    for message in last_turns(traj):
        role = message.get("role", "?")
        said = [str(message.get("content") or "")] + [
            f"→ {message_call_line(c)}" for c in message.get("tool_calls") or [] if isinstance(c.get("function"), dict)]
        lines.append(Text(f"{role}: ", style="bold cyan" if role == "assistant" else "bold")
                     + Text(" ".join(part for part in said if part)))
    if traj.get("judge_explanation"):
        lines.append(Rule("judge", style="dim"))
        lines.append(Text(traj["judge_explanation"], style="italic"))
    return RichGroup(*lines)


class GroupScreen(NavScreen):
    """One column per trajectory of the cursor's group (issue 6, part 3):
    completion or last turns, verifier reward and components, judge score,
    rank and explanation, advantage. ``s`` changes the order."""

    VIEW_NAME = "group"
    versions: var[list[dict]] = var(list, init=False, bindings=True)
    """The run's reward versions (``v`` compares rankings under two of them)."""
    BINDINGS = [Binding("escape", "app.pop_screen", "Back"),
                Binding("s", "cycle_sort", "Sort"),
                Binding("v", "toggle_versions", "Versions")]

    def __init__(self) -> None:
        super().__init__()
        self.sort = SORTS[0]
        self.compare = False  # show rankings under two rubric versions
        self.ranking: Table | str | None = None  # the last comparison shown
        self.shown: list[dict] = []  # the trajectories in column order
        self._view: View | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="group-title")
        yield Horizontal(id="columns")
        yield Static("", id="versions")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        run_id = self.app.run_id
        if run_id is not None:
            self.app.read_in_worker(lambda reader: reader.reward_versions(run_id), self._got_versions)

    def _got_versions(self, versions: list[dict]) -> None:
        self.versions = versions  # the footer shows v from two versions on (check_action)
        self._versions_hint()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``v`` only when the run's rewards were edited (two or more versions)."""
        if action == "toggle_versions":
            return len(self.versions) >= 2
        return True

    def _versions_hint(self) -> None:
        if not self.compare:
            numbers = ", ".join(f"v{v['version']}" for v in self.versions) or "-"
            hint = " · v: rankings under two versions" if len(self.versions) >= 2 else ""
            self.query_one("#versions", Static).update(f"reward versions of the run: {numbers}{hint}")

    def action_toggle_versions(self) -> None:
        """``v``: show / hide the group's ranking under two rubric versions."""
        self.compare = not self.compare
        if self.compare and self._view is not None and self._view.group is not None:
            self._compare_versions(self._view.group)
        else:
            self._versions_hint()

    def _compare_versions(self, group: dict) -> None:
        """Re-score the group under both versions in the reward sandbox (a
        child process, engine.rewards.edit.check.dry_run), off the UI thread."""
        trajs = sorted(group["trajectories"], key=lambda t: t["idx"])
        picked = pick_versions(trajs, self.versions)
        panel = self.query_one("#versions", Static)
        if picked is None:
            panel.update("this group's reward version is unknown: nothing to compare")
            return
        panel.update(f"re-scoring under v{picked[0]['version']} and v{picked[1]['version']}…")
        scenario = (self.app.run_row or {}).get("scenario", "")
        self.run_worker(lambda: self._rescore(group, scenario, trajs, *picked),
                        thread=True, exclusive=True, group="versions")

    def _rescore(self, group: dict, scenario: str, trajs: list[dict], old: dict, new: dict) -> None:
        from rlab.engine.rewards.edit.check import RewardCheckError, dry_run
        from rlab.engine.rewards.edit.stored import stored_group

        example = self.app.examples.example(scenario, group)
        with self.app.view_reader as reader:  # the group's trajectories are in idx order, as trajs
            groups = [stored_group(reader, group, example)]
        try:
            report = dry_run(old["source"], new["source"], groups)
            result = ranking_table(trajs, old, new, report.groups[0])
        except (RewardCheckError, ValueError) as exc:
            result = f"could not re-score: {exc}"
        self.app.call_from_thread(self._show_ranking, group["id"], result)

    def _show_ranking(self, group_id: int, result) -> None:
        view = self._view
        if self.compare and view is not None and view.group is not None and view.group["id"] == group_id:
            self.ranking = result
            self.query_one("#versions", Static).update(result)

    def action_cycle_sort(self) -> None:
        """``s``: index -> reward -> judge rank."""
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        if self._view is not None:
            self.show_view(self._view)

    def show_view(self, view: View) -> None:
        self._view = view
        group = view.group
        if group is None:
            self.query_one("#group-title", Static).update("no group at this step")
            return
        self.title = f"group #{group['id']} · step {group['step']}"
        judge = judge_line(group)
        self.query_one("#group-title", Static).update(
            f"step {group['step']} · group {view.cursor.group_pos + 1}/{len(view.groups)} · "
            f"prompt: {clip(group['prompt'], 70)} · judge: {judge} · sorted by {self.sort}")
        trajs = group["trajectories"]
        selected = trajs[view.cursor.traj_pos]["id"] if trajs else None
        self.shown = sort_trajectories(trajs, self.sort)
        columns = self.query_one("#columns", Horizontal)
        columns.remove_children()
        # Explicit cell widths: with "1fr" and a min-width that the group
        # cannot fit (8 x 24 > 160 cells), Textual gives every column the
        # full width; fixed widths share the screen and scroll beyond it.
        width = max(MIN_COLUMN_WIDTH, self.size.width // max(len(self.shown), 1))
        shown = [VerticalScroll(Static(column_text(t, t["id"] == selected)),
                                classes="traj-column" + (" -selected" if t["id"] == selected else ""))
                 for t in self.shown]
        for column in shown:
            column.styles.width = width
        columns.mount_all(shown)
        if self.compare:
            self._compare_versions(group)
        else:
            self._versions_hint()


MIN_COLUMN_WIDTH = 18


def competition_ranks(rewards: list[float]) -> list[int]:
    """Rank of each reward, 1 = best; ties share the better rank ("1224")."""
    return [1 + sum(other > r for other in rewards) for r in rewards]


def pick_versions(trajs: list[dict], versions: list[dict]) -> tuple[dict, dict] | None:
    """(the version that scored the group, the version to compare it with):
    the latest version, or the one before when the latest scored it. None
    with fewer than two versions or when the scoring version is unknown."""
    by_number = {v["version"]: v for v in versions}
    scored = max((t.get("reward_version") or 0 for t in trajs), default=0)
    if len(by_number) < 2 or scored not in by_number:
        return None
    latest = max(by_number)
    other = latest if latest != scored else max(n for n in by_number if n != scored)
    return by_number[scored], by_number[other]


def ranking_table(trajs: list[dict], old: dict, new: dict, comparison) -> Table:
    """Rewards and ranks of the group's trajectories under two rubric versions,
    side by side (``comparison`` is an ``engine.rewards.edit.compare.GroupComparison``)."""
    a, b = old["version"], new["version"]
    tau = "undefined" if comparison.tau is None else f"{comparison.tau:+.2f}"
    table = Table(title=f"ranking under v{a} vs v{b} · Kendall tau {tau} · ranking "
                        f"{'changed' if comparison.ranking_changed else 'unchanged'}",
                  expand=False, box=None, padding=(0, 2))
    for column in ("trajectory", f"reward v{a}", f"rank v{a}", f"reward v{b}", f"rank v{b}"):
        table.add_column(column, justify="right")
    old_ranks = competition_ranks(comparison.old_rewards)
    new_ranks = competition_ranks(comparison.new_rewards)
    for i, t in enumerate(trajs):
        moved = "bold yellow" if old_ranks[i] != new_ranks[i] else ""
        table.add_row(f"#{t['idx']}", fmt(comparison.old_rewards[i]), str(old_ranks[i]),
                      fmt(comparison.new_rewards[i]), str(new_ranks[i]), style=moved)
    return table
