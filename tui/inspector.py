"""Trajectory inspector (``t``): conversation, per-turn returns and advantages,
the scorer's details, and the completion's tokens shaded by advantage, logprob or
the sampler's mismatch with the trained policy."""

from __future__ import annotations

import json
import re

from rich.console import Group as RichGroup
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, Static

from rlab.store.records import TOOL_ERROR_PREFIX
from rlab.store.tokens import unpack, unpack_logprobs
from rlab.engine.cli.formatting import fmt, message_call_line
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


#: What ``l`` shades the tokens by, in the order it cycles, with the tokens panel's title.
SHADINGS = {"advantage": "tokens by advantage sign", "logprob": "tokens by logprob",
            "mismatch": "tokens by sampler mismatch"}

#: Below this many nats between the trained policy's log-prob and the sampler's a token is not shaded.
MISMATCH_FLOOR = 0.01


def mismatch_style(diff: float) -> str:
    """Background by ``diff`` = the trained policy's log-prob of a token minus the
    sampler's (nats; the token's importance weight is exp(diff)): blue where the policy
    gives the token more than the sampler did, red where less, full at 1 nat, none
    below :data:`MISMATCH_FLOOR`."""
    if abs(diff) < MISMATCH_FLOOR:
        return ""
    level = int(60 + 140 * min(abs(diff), 1.0))
    return f"on rgb(30,{level // 2},{level})" if diff > 0 else f"on rgb({level},30,{level // 3})"


def _mismatch_tokens(traj: dict) -> Text:
    """The completion's tokens shaded by :func:`mismatch_style`, under a legend, or a note
    saying why this trajectory has no trainer log-probs."""
    tokens, sampled = token_pieces(traj)
    policy = unpack_logprobs(traj.get("token_policy_logprobs"))
    text = Text()
    if sampled is None or policy is None or len(policy) != len(tokens):
        text.append("no trainer log-probs stored for this trajectory: the trainer measures them at the update, "
                    "for single-turn trajectories of a group with reward spread; press l for advantage shading\n\n",
                    style="italic yellow")
        text.append("".join(tokens))
        return text
    diffs = [p - q for p, q in zip(policy, sampled)]
    text.append(f"trainer - sampler log-prob: mean |diff| {sum(map(abs, diffs)) / max(len(diffs), 1):.3f} nats, "
                f"max {max(map(abs, diffs), default=0.0):.3f}; blue: the policy gives the token more, red: less "
                f"(importance weight exp(diff); full colour at 1 nat)\n\n", style="dim")
    for tok, diff in zip(tokens, diffs):
        text.append(tok, style=mismatch_style(diff))
    return text


def shaded_tokens(traj: dict, shading: str) -> Text:
    """The completion's tokens shaded by ``shading``, a key of :data:`SHADINGS`: advantage
    sign, logprob (with a note when no logprobs were stored), or the sampler's mismatch
    (:func:`mismatch_style`). In a multi-step episode each assistant turn is shaded by
    its own advantage A."""
    if shading == "mismatch":
        return _mismatch_tokens(traj)
    by_logprob = shading == "logprob"
    turns = traj.get("turns") or []
    if turns and not by_logprob:
        said = [m for m in traj.get("messages") or [] if m.get("role") == "assistant"]
        text = Text()
        for turn, message in zip(turns, said):
            text.append(f"t{turn['t']}: ", style="dim")
            # a turn that only calls has no content: its trained tokens are the calls it wrote
            for tok in _PIECES.findall(str(message.get("content") or "") + _calls_written(message)):
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


def _calls_written(message: dict) -> str:
    """An assistant message's tool calls as ``→ name(args)``, one after another ("" without calls)."""
    return "".join(f" → {message_call_line(call)}" for call in message.get("tool_calls") or [])


def conversation(traj: dict) -> RichGroup:
    """The conversation message by message, turn by turn: each assistant message of a
    multi-step episode is a numbered turn (with its r_t, R_t, A^E, A^S and A under
    GiGPO); its tool calls follow it marked ``→``, and each result marked ``←``
    (``✗`` for an error) with the call's seconds."""
    turns = traj.get("turns") or []
    calls = {c["call_id"]: c for c in traj.get("calls") or []}
    unparsed: list[dict] = []  # the last turn's calls that did not parse, answered by ``user`` errors
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
        if role == "user" and unparsed and str(message.get("content") or "").startswith(TOOL_ERROR_PREFIX):
            lines.extend(_unparsed_call(message, unparsed.pop(0)))
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
        if role == "assistant":
            unparsed = [c for c in traj.get("calls") or [] if c["turn"] == t and not c["name"]]
        t += role == "assistant"
        if message.get("content") or not message.get("tool_calls"):
            lines.append(Text(str(message.get("content") or "")))
        for call in message.get("tool_calls") or []:
            lines.append(Text(f"→ call {message_call_line(call)}", style="bold magenta"))
        lines.append(Text(""))
    return RichGroup(*lines)


def _tool_result(message: dict, call: dict | None) -> list[Text]:
    """A ``tool`` message: ``← name · seconds`` and its text, ``✗`` in red for an error."""
    failed = call is not None and call.get("error") is not None
    took = f" · {call['seconds']:.3f} s" if call is not None else ""
    head = Text(f"{'✗' if failed else '←'} {message.get('name') or 'tool'}{took}",
                style="bold red" if failed else "bold magenta")
    return [head, Text(str(message.get("content") or ""), style="red" if failed else ""), Text("")]


def _unparsed_call(message: dict, call: dict) -> list[Text]:
    """The answer to a call that did not parse: ``✗ call did not parse`` and what the policy was
    told, in red (a ``user`` message: the call named no tool a ``tool`` message could answer)."""
    return [Text("✗ call did not parse", style="bold red"),
            Text(str(message.get("content") or ""), style="red"), Text("")]


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
    """The cursor's trajectory in full (issue 6, part 4). ``l`` cycles the token
    shading through :data:`SHADINGS`: advantage sign, logprob, sampler mismatch."""

    VIEW_NAME = "trajectory"
    BINDINGS = [Binding("escape", "app.pop_screen", "Back"),
                Binding("l", "toggle_shading", "Shading")]

    def __init__(self) -> None:
        super().__init__()
        self.shading = "advantage"
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
        self.query_one("#traj-tokens").border_title = SHADINGS[self.shading]

    def action_toggle_shading(self) -> None:
        """``l``: the next shading of :data:`SHADINGS` (after the last, the first)."""
        names = list(SHADINGS)
        self.shading = names[(names.index(self.shading) + 1) % len(names)]
        self._set_tokens_title()
        if self._traj is not None:
            self.query_one("#tokens-text", Static).update(shaded_tokens(self._traj, self.shading))

    def show_view(self, view: View) -> None:
        traj = view.trajectory
        self._traj = traj
        if traj is None:
            self.query_one("#conversation-text", Static).update("no trajectory here")
            return
        self.title = f"trajectory #{traj['id']} · step {traj['step']}"
        self.query_one("#conversation-text", Static).update(conversation(traj))
        self.query_one("#details-text", Static).update(summary_text(traj))
        self.query_one("#tokens-text", Static).update(shaded_tokens(traj, self.shading))
