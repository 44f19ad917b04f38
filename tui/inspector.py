"""Trajectory inspector (``t``): conversation, per-turn returns and advantages,
the scorer's details, and the completion's tokens shaded by advantage or logprob."""

from __future__ import annotations

import json
import re

from rich.console import Group as RichGroup
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, Static

from rlab.store.tokens import unpack
from rlab.engine.cli.formatting import call_line, fmt
from rlab.tui.view import NavScreen, View

_PIECES = re.compile(r"\s+|[^\s]+")


def token_pieces(traj: dict) -> tuple[list[str], list[float] | None]:
    """The completion split into tokens, and their logprobs (nats) if stored.

    Uses the stored per-token columns (``token_ends``/``token_logprobs``,
    store/tokens.py) when the engine kept them, else ``details["tokens"]`` /
    ``details["logprobs"]`` (imported runs), else whitespace-separated
    pieces and no logprobs.
    """
    stored = unpack(traj.get("completion") or "", traj.get("token_ends"), traj.get("token_logprobs"))
    if stored is not None:
        return stored
    details = traj.get("details") or {}
    tokens, logprobs = details.get("tokens"), details.get("logprobs")
    if isinstance(tokens, list) and tokens:
        ok = isinstance(logprobs, list) and len(logprobs) == len(tokens)
        return [str(t) for t in tokens], [float(x) for x in logprobs] if ok else None
    return _PIECES.findall(traj.get("completion") or ""), None


def advantage_style(advantage: float | None) -> str:
    """Background by advantage sign: green (reinforced), red (discouraged), none at 0."""
    if not advantage:
        return ""
    return "on dark_green" if advantage > 0 else "on dark_red"


def logprob_style(logprob: float) -> str:
    """Background by logprob (nats): the less likely the token, the redder."""
    p = min(max(2.718281828 ** logprob, 0.0), 1.0)
    return f"on rgb({int(160 * (1 - p))},{int(40 + 80 * p)},40)"


def shaded_tokens(traj: dict, by_logprob: bool) -> Text:
    """The completion's tokens shaded by advantage sign, or by logprob when
    ``by_logprob`` (with a note when no logprobs were stored). In a
    multi-step episode each assistant turn is shaded by its own advantage A."""
    turns = traj.get("turns") or []
    if turns and not by_logprob:
        said = [m for m in traj.get("messages") or [] if m.get("role") == "assistant"]
        text = Text()
        for turn, message in zip(turns, said):
            text.append(f"t{turn['t']}: ", style="dim")
            for tok in _PIECES.findall(str(message.get("content") or "")):
                text.append(tok, style=advantage_style(turn["advantage"]) if tok.strip() else "")
            text.append("\n")
        return text
    tokens, logprobs = token_pieces(traj)
    text = Text()
    if by_logprob and logprobs is None:
        text.append("no per-token logprobs stored for this trajectory; "
                    "press l for advantage shading\n\n", style="italic yellow")
    for i, tok in enumerate(tokens):
        if by_logprob and logprobs is not None:
            text.append(tok, style=logprob_style(logprobs[i]))
        else:
            text.append(tok, style=advantage_style(traj.get("advantage")) if tok.strip() else "")
    return text


def conversation(traj: dict) -> RichGroup:
    """The conversation message by message, turn by turn: each assistant message of a
    multi-step episode is a numbered turn (with its r_t, R_t, A^E, A^S and A under
    GiGPO); its tool calls follow it marked ``→``, and each result marked ``←``
    (``✗`` for an error) with the call's seconds."""
    turns = traj.get("turns") or []
    calls = {c["call_id"]: c for c in traj.get("calls") or []}
    lines: list = []
    messages = traj.get("messages") or [{"role": "user", "content": traj.get("prompt", "")},
                                         {"role": "assistant", "content": traj.get("completion", "")}]
    several = sum(m.get("role") == "assistant" for m in messages) > 1
    t = 0
    for message in messages:
        role = message.get("role", "?")
        if role == "tool":
            lines.extend(_tool_result(message, calls.get(str(message.get("tool_call_id")))))
            continue
        # the turn's number, unless its GiGPO line below says it
        numbered = role == "assistant" and several and t >= len(turns)
        lines.append(Text(f"{role}" + (f" · turn {t}" if numbered else ""),
                          style="bold cyan" if role == "assistant" else "bold"))
        if role == "assistant" and t < len(turns):
            turn = turns[t]
            lines.append(Text(
                f"turn {turn['t']} · r {fmt(turn['reward'])} · R {fmt(turn['ret'])} · "
                f"A^E {fmt(turn['adv_episode'], '+.3f')} · A^S {fmt(turn['adv_step'], '+.3f')} · "
                f"A {fmt(turn['advantage'], '+.3f')} · anchor {turn['anchor_id']} "
                f"(size {turn['anchor_size']})", style=advantage_style(turn["advantage"])))
        t += role == "assistant"
        if message.get("content") or not message.get("tool_calls"):
            lines.append(Text(str(message.get("content") or "")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            lines.append(Text(f"→ call {call_line(function.get('name', '?'), function.get('arguments'))}",
                              style="bold magenta"))
        lines.append(Text(""))
    return RichGroup(*lines)


def _tool_result(message: dict, call: dict | None) -> list[Text]:
    """A ``tool`` message: ``← name · seconds`` and its text, ``✗`` in red for an error."""
    failed = call is not None and call.get("error") is not None
    took = f" · {call['seconds']:.3f} s" if call is not None else ""
    head = Text(f"{'✗' if failed else '←'} {message.get('name') or 'tool'}{took}",
                style="bold red" if failed else "bold magenta")
    return [head, Text(str(message.get("content") or ""), style="red" if failed else ""), Text("")]


def summary_text(traj: dict) -> Text:
    """Reward, components, advantage, judge and the scorer's details dict."""
    text = Text()
    text.append(f"trajectory #{traj['id']} · step {traj['step']} · index {traj['idx']}\n", style="bold")
    text.append(f"reward {fmt(traj['reward'])} (version {traj.get('reward_version') or '-'}) · "
                f"A {fmt(traj.get('advantage'), '+.3f')} · {traj.get('completion_tokens', 0)} tokens"
                f"{' · truncated' if traj.get('truncated') else ''}\n")
    for name, value in (traj.get("components") or {}).items():
        text.append(f"  {name} = {fmt(value)}\n")
    if traj.get("judge_score") is not None:
        text.append(f"judge {fmt(traj['judge_score'])} · rank {traj.get('judge_rank')}\n", style="yellow")
        if traj.get("judge_explanation"):
            text.append(f"  {traj['judge_explanation']}\n", style="italic")
    text.append("details\n", style="bold")
    text.append(json.dumps(traj.get("details") or {}, indent=2, sort_keys=True, default=str))
    return text


class TrajectoryScreen(NavScreen):
    """The cursor's trajectory in full (issue 6, part 4). ``l`` toggles token
    shading between advantage sign and logprob."""

    VIEW_NAME = "trajectory"
    BINDINGS = [Binding("escape", "app.pop_screen", "Back"),
                Binding("l", "toggle_shading", "Shading")]

    def __init__(self) -> None:
        super().__init__()
        self.by_logprob = False
        self._traj: dict | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            with VerticalScroll(id="conversation"):
                yield Static("", id="conversation-text")
            with Vertical(id="traj-side"):
                with VerticalScroll(id="traj-details"):
                    yield Static("", id="details-text")
                with VerticalScroll(id="traj-tokens"):
                    yield Static("", id="tokens-text")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#conversation").border_title = "conversation"
        self.query_one("#traj-details").border_title = "reward and scorer details"
        self._set_tokens_title()

    def _set_tokens_title(self) -> None:
        self.query_one("#traj-tokens").border_title = (
            "tokens by logprob" if self.by_logprob else "tokens by advantage sign")

    def action_toggle_shading(self) -> None:
        """``l``: shade tokens by logprob instead of advantage sign, or back."""
        self.by_logprob = not self.by_logprob
        self._set_tokens_title()
        if self._traj is not None:
            self.query_one("#tokens-text", Static).update(shaded_tokens(self._traj, self.by_logprob))

    def show_view(self, view: View) -> None:
        traj = view.trajectory
        self._traj = traj
        if traj is None:
            self.query_one("#conversation-text", Static).update("no trajectory here")
            return
        self.title = f"trajectory #{traj['id']} · step {traj['step']}"
        self.query_one("#conversation-text", Static).update(conversation(traj))
        self.query_one("#details-text", Static).update(summary_text(traj))
        self.query_one("#tokens-text", Static).update(shaded_tokens(traj, self.by_logprob))
