"""Group view (``g``): a group's trajectories side by side, one column each."""

from __future__ import annotations

from rich.console import Group as RichGroup
from rich.rule import Rule
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header, Static

from tui.dashboard import clip, fmt
from tui.view import NavScreen, View

SORTS = ("index", "reward", "judge rank")
"""Column orders offered by ``s``: as sampled, by verifier reward (best
first), by the judge's rank (1 first)."""


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
    lines.append(Rule(style="dim"))
    for message in last_turns(traj):
        role = message.get("role", "?")
        lines.append(Text(f"{role}: ", style="bold cyan" if role == "assistant" else "bold")
                     + Text(str(message.get("content") or "")))
    if traj.get("judge_explanation"):
        lines.append(Rule("judge", style="dim"))
        lines.append(Text(traj["judge_explanation"], style="italic"))
    return RichGroup(*lines)


class GroupScreen(NavScreen):
    """One column per trajectory of the cursor's group (issue 6, part 3):
    completion or last turns, verifier reward and components, judge score,
    rank and explanation, advantage. ``s`` changes the order."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back"),
                Binding("s", "cycle_sort", "Sort")]

    def __init__(self) -> None:
        super().__init__()
        self.sort = SORTS[0]
        self.shown: list[dict] = []  # the trajectories in column order
        self._view: View | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="group-title")
        yield Horizontal(id="columns")
        yield Static("", id="versions")
        yield Footer(compact=True)

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
        judge = group.get("judge_status") or "no judge"
        if group.get("judge_error"):
            judge += f" ({clip(group['judge_error'], 60)})"
        self.query_one("#group-title", Static).update(
            f"step {group['step']} · group {view.cursor.group_pos + 1}/{len(view.groups)} · "
            f"prompt: {clip(group['prompt'], 70)} · judge: {judge} · sorted by {self.sort}")
        trajs = group["trajectories"]
        selected = trajs[view.cursor.traj_pos]["id"] if trajs else None
        self.shown = sort_trajectories(trajs, self.sort)
        columns = self.query_one("#columns", Horizontal)
        columns.remove_children()
        columns.mount_all(
            VerticalScroll(Static(column_text(t, t["id"] == selected)),
                           classes="traj-column" + (" -selected" if t["id"] == selected else ""))
            for t in self.shown)
        self.query_one("#versions", Static).update(versions_line(trajs))


def versions_line(trajs: list[dict]) -> str:
    """Which rubric versions scored the group; the ranking under each when
    the group's trajectories were scored by more than one version."""
    versions = sorted({t.get("reward_version") for t in trajs if t.get("reward_version") is not None})
    if len(versions) <= 1:
        return f"reward version: {versions[0] if versions else '-'}"
    parts = []
    for v in versions:
        ranked = sort_trajectories([t for t in trajs if t.get("reward_version") == v], "reward")
        parts.append(f"v{v}: " + " > ".join(f"#{t['idx']}" for t in ranked))
    return "rankings by reward version · " + " | ".join(parts)
