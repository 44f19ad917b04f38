"""Verifier rubric of the support-replies scenario: cheap, checkable signals.

These do not know whether a reply is *good* (that is the judge's job); they
check what can be checked: the request's key points are mentioned, the tone
is polite, the length is sane, there is a greeting and a sign-off, and no
template placeholders are left. Edit freely (in the TUI with ``e``); each
function follows ``score(example, completion) -> {"reward": float, "details": dict}``
and ``WEIGHTS`` names the rubric's functions and their weights.
"""

import re

MIN_WORDS, MAX_WORDS = 30, 120

_GREETING = re.compile(r"^\s*(hi|hello|hey|dear|good (morning|afternoon|evening))\b", re.I)
_SIGN_OFF = re.compile(
    r"\b(regards|sincerely|best wishes|warm wishes|cheers|thanks|thank you)\b|northwind home team",
    re.I,
)
_EMPATHY = re.compile(r"\b(sorry|apologi[sz]e|apologies|thank|thanks|appreciate|understand)", re.I)
_RUDE = re.compile(
    r"not our problem|your (?:own )?fault|calm down|stop complaining"
    r"|\bwhatever\b|\bstupid\b|\bidiot",
    re.I,
)
_SHOUTING = re.compile(r"\b[A-Z]{4,}\b")
_PLACEHOLDER = re.compile(r"\[[^\]]*\]|<[^>]*>|\{[^}]*\}|\bX{3,}\b|\bTBD\b")


def length_ok(example, completion):
    """1.0 for 30 to 120 words; linear below (words / 30) and above (down to 0 at 240).

    details: ``parse_status`` ``ok``, ``too_short``, ``too_long`` or ``empty``;
    ``words`` the whitespace-separated word count.
    """
    words = len(completion.split())
    if words == 0:
        return {"reward": 0.0, "details": {"parse_status": "empty", "words": 0}}
    if words < MIN_WORDS:
        return {"reward": words / MIN_WORDS,
                "details": {"parse_status": "too_short", "words": words}}
    if words > MAX_WORDS:
        reward = max(0.0, 1.0 - (words - MAX_WORDS) / MAX_WORDS)
        return {"reward": reward, "details": {"parse_status": "too_long", "words": words}}
    return {"reward": 1.0, "details": {"parse_status": "ok", "words": words}}


def greeting_and_signoff(example, completion):
    """0.5 for a greeting on the first line plus 0.5 for a sign-off in the last three lines."""
    lines = [line for line in completion.strip().splitlines() if line.strip()]
    greets = bool(lines) and bool(_GREETING.match(lines[0]))
    signs = any(_SIGN_OFF.search(line) for line in lines[-3:])
    status = "ok" if greets and signs else "missing_greeting" if not greets else "missing_sign_off"
    return {
        "reward": 0.5 * greets + 0.5 * signs,
        "details": {"parse_status": "empty" if not lines else status,
                    "greeting": greets, "sign_off": signs},
    }


def polite(example, completion):
    """0.0 for rude phrases or shouting (3+ all-caps words), 1.0 for an
    apology, thanks or acknowledgement, else 0.5 (neutral)."""
    rude = [match.group(0) for match in _RUDE.finditer(completion)]
    shouting = len(_SHOUTING.findall(completion)) >= 3
    if rude or shouting:
        return {"reward": 0.0, "details": {"parse_status": "rude", "rude": rude,
                                           "shouting": shouting}}
    warm = bool(_EMPATHY.search(completion))
    return {"reward": 1.0 if warm else 0.5,
            "details": {"parse_status": "ok" if warm else "neutral", "rude": [],
                        "shouting": False}}


def addresses_request(example, completion):
    """Fraction of the example's ``keywords`` (the request's key points) the
    reply mentions, case-insensitively; details list the ones missing."""
    keywords = example.get("keywords") or []
    if not keywords:
        return {"reward": 1.0, "details": {"parse_status": "no_keywords", "missing": []}}
    text = completion.lower()
    missing = [k for k in keywords if k.lower() not in text]
    return {
        "reward": 1.0 - len(missing) / len(keywords),
        "details": {"parse_status": "ok" if not missing else "partial", "missing": missing},
    }


def no_placeholders(example, completion):
    """0.0 when template leftovers such as ``[Your Name]``, ``<name>``,
    ``{order}`` or ``XXX`` remain, else 1.0."""
    found = _PLACEHOLDER.findall(completion)
    return {"reward": 0.0 if found else 1.0,
            "details": {"parse_status": "placeholder" if found else "ok", "found": found}}


def all_checks(example, completion):
    """1.0 when every check above scores 1.0, else 0.0: the scenario's success
    function (weight 0: it decides what counts as solved, the others pay).

    details: ``failed`` names the checks below 1.0.
    """
    checks = {"addresses_request": addresses_request, "polite": polite, "length_ok": length_ok,
              "greeting_and_signoff": greeting_and_signoff, "no_placeholders": no_placeholders}
    failed = [name for name, check in checks.items() if check(example, completion)["reward"] < 1.0]
    return {"reward": 0.0 if failed else 1.0, "details": {"failed": failed}}


WEIGHTS = {
    "addresses_request": 0.4,
    "polite": 0.2,
    "length_ok": 0.15,
    "greeting_and_signoff": 0.15,
    "no_placeholders": 0.1,
    "all_checks": 0.0,
}
