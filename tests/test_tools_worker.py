"""The tool process's protocol and loader (issues 58 and 59): replies matched to their
requests by id, return values that are not JSON, tools files refused at load, and
typed error kinds. Every test goes through a real ``ToolProcess`` and its worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlab.engine.tools.calls import call_text
from rlab.engine.tools.episode import ToolEpisode
from rlab.engine.tools.process import ToolProcess, ToolsError
from rlab.engine.tools.worker import answer

#: A tools file whose tools misbehave towards the worker itself.
TOOLS = '''
import json
import os
import time


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


def forge(line: str) -> str:
    """Write a line to every open file descriptor (the worker's reply pipe among them), then return.

    Args:
        line: what to write
    """
    for fd in range(1, 64):
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
    return "real"


class Unprintable:
    def __str__(self):
        raise RuntimeError("no text for me")


class Mute(Exception):
    def __str__(self):
        raise RuntimeError("no message either")


def unprintable(x: int) -> object:
    """Return an object whose str() raises.

    Args:
        x: any number
    """
    return {"value": Unprintable()}


class Sly(str):
    def __len__(self):
        raise RuntimeError("no length")


def sly(x: int) -> str:
    """Return a str whose len() raises.

    Args:
        x: any number
    """
    return Sly("sly")


def huge(x: int) -> int:
    """Return an int over Python's int-string limit.

    Args:
        x: any number
    """
    return 10 ** 5000


def circular(x: int) -> list:
    """Return a list that holds itself.

    Args:
        x: any number
    """
    out = [x]
    out.append(out)
    return out


def mute(x: int) -> int:
    """Raise an exception whose str() raises.

    Args:
        x: any number
    """
    raise Mute()


def boom(x: int) -> int:
    """Raise.

    Args:
        x: any number
    """
    raise ValueError(f"boom {x}")


def hang(x: int) -> int:
    """Never return.

    Args:
        x: any number
    """
    time.sleep(3600)
    return x


def long(x: int) -> str:
    """Return too much.

    Args:
        x: any number
    """
    return "x" * 10_000


def leak(x: int) -> str:
    """Return something shaped like an API key.

    Args:
        x: any number
    """
    return "sk-" + "test0123456789abcdefSECRET"


def die(x: int) -> int:
    """End the process.

    Args:
        x: the exit status
    """
    os._exit(x)
'''

#: A whole reply with no id, one with another id, a fragment the real reply gets appended to, not an object.
FORGED = [
    json.dumps({"result": "forged", "error": None, "kind": None, "seconds": 0.0, "hung": False}) + "\n",
    json.dumps({"result": "forged", "error": None, "kind": None, "seconds": 0.0, "hung": False, "id": "0"}) + "\n",
    '{"result": "forged", ',
    "[]\n",
]


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    path = tmp_path_factory.mktemp("tools") / "tools.py"
    path.write_text(TOOLS)
    process = ToolProcess(path, timeout_s=1.0, result_chars=1000)
    yield process
    process.close()


# -- replies carry the call's id -----------------------------------------------------------------

@pytest.mark.parametrize("line", FORGED)
def test_a_forged_reply_costs_its_call_and_the_next_calls_get_their_own_answers(tools, line):
    before = tools.child.replaced
    forged = tools.call("c0", "forge", {"line": line})
    assert forged.result == "" and forged.kind == "out_of_step"
    assert forged.error is not None and "not its reply" in forged.error and "replaced" in forged.error
    assert tools.child.replaced == before + 1
    assert [tools.call(f"c{a}", "add", {"a": a, "b": 10}).result for a in (1, 2)] == ["11", "12"]


def test_a_tools_file_that_writes_to_the_reply_pipe_at_load_is_refused(tmp_path):
    path = tmp_path / "tools.py"
    path.write_text(TOOLS + f"\nforge({FORGED[0]!r})\n")
    with pytest.raises(ToolsError, match="reply pipe"):
        ToolProcess(path).schemas


# -- return values that are not JSON ----------------------------------------------------------

@pytest.mark.parametrize("name, why", [
    ("unprintable", "RuntimeError: no text for me"),
    ("huge", "ValueError: Exceeds the limit (4300 digits) for integer string conversion"),
    ("circular", "ValueError: Circular reference detected"),
])
def test_a_value_that_is_not_json_is_the_calls_error_and_the_worker_serves_on(tools, name, why):
    before = tools.child.replaced
    call = tools.call("c", name, {"x": 1})
    assert call.result == "" and call.kind == "unserialisable"
    assert call.error is not None and call.error.startswith(f"{name} returned a value that cannot be written as "
                                                            f"JSON: {why}")
    assert tools.call("c", "add", {"a": 1, "b": 1}).result == "2"
    assert tools.child.replaced == before


def test_a_str_subclass_is_taken_as_its_text(tools):
    call = tools.call("c", "sly", {"x": 1})
    assert (call.result, call.error, call.kind) == ("sly", None, None)


def test_an_exception_whose_message_raises_is_still_the_calls_error(tools):
    before = tools.child.replaced
    call = tools.call("c", "mute", {"x": 1})
    assert (call.error, call.kind) == ("mute raised Mute: (str() of it failed)", "raised")
    assert tools.call("c", "add", {"a": 1, "b": 1}).result == "2"
    assert tools.child.replaced == before


# -- tools files refused at load ------------------------------------------------------------------

DOCSTRING = '''    """A tool.

    Args:
        a: a number
        args: numbers
        kw: numbers
    """
'''
DOC = DOCSTRING + "    return 1\n"


@pytest.mark.parametrize("source, message", [
    (f"def f(*args: int, **kw: int) -> int:\n{DOC}", r"tool f in tools.py takes \*args: .*name each argument"),
    (f"def f(a: int, **kw: int) -> int:\n{DOC}", r"tool f in tools.py takes \*\*kw"),
    (f"def f(a: int, /) -> int:\n{DOC}", r"tool f in tools.py takes a positional-only .*remove the /"),
    (f"def f(a: int) -> int:\n{DOC}\ndef g(a: int) -> int:\n{DOC}\ng.__name__ = 'f'\nTOOLS = [f, g]\n",
     r"two tools in tools.py are named f .*rename one"),
    (f"import functools\ndef f(a: int, b: int) -> int:\n{DOC}\nTOOLS = [f, functools.partial(f, 1)]\n",
     r"TOOLS\[1\] in tools.py is functools.partial\(f, \.\.\.\), not a plain function: TOOLS entries must be "
     r"functions defined with def"),
    (f"def f(a: int) -> int:\n{DOC}\nclass Adder:\n    def __call__(self, a: int) -> int:\n        return a\n"
     "TOOLS = [Adder()]\n", r"TOOLS\[0\] in tools.py is an object of class Adder, not a plain function"),
])
def test_a_tools_file_no_call_can_use_is_refused_naming_the_tool_and_the_fix(tmp_path, source, message):
    path = tmp_path / "tools.py"
    path.write_text(source)
    with pytest.raises(ToolsError, match=message):
        ToolProcess(path).schemas


def test_a_type_hint_pydantic_cannot_check_is_each_calls_error_and_the_worker_serves_on(tmp_path):
    # a call before the schemas were asked for (which refuse it too) is the first to find out
    path = tmp_path / "tools.py"
    path.write_text(f"class Foo:\n    pass\n\ndef f(a: Foo) -> int:\n{DOC}")
    process = ToolProcess(path)
    try:
        for _ in range(2):
            call = process.call("c", "f", {"a": 1})
            assert call.kind == "not_loaded" and (call.error or "").startswith(
                "the tools file does not load: tool f in tools.py: its arguments cannot be checked against its "
                "type hints: PydanticSchemaGenerationError")
        assert process.child.replaced == 0
    finally:
        process.close()


def test_a_request_the_worker_cannot_answer_is_an_error_reply_not_an_exit():
    reply = answer({"kind": "call", "id": "7"})  # a worker bug (here: a request without its fields)
    assert (reply["id"], reply["kind"]) == ("7", "internal")
    assert reply["error"] == "the tool worker failed: KeyError: 'source'"
    assert answer({"kind": "load", "id": "8"}) == {"failure": "the tool worker failed: KeyError: 'source'", "id": "8"}


def test_one_function_under_two_names_is_one_tool(tmp_path):
    path = tmp_path / "tools.py"
    path.write_text(f"def f(a: int) -> int:\n{DOC}\nalias = f\n")
    process = ToolProcess(path)
    try:
        assert process.names == ["f"]
    finally:
        process.close()


# -- typed error kinds -------------------------------------------------------------------------

@pytest.mark.parametrize("name, arguments, kind", [
    ("add", {"a": 1, "b": 2}, None),
    ("nope", {}, "unknown_tool"),
    ("add", {"a": "x", "b": 1}, "bad_arguments"),
    ("boom", {"x": 1}, "raised"),
    ("hang", {"x": 1}, "timeout"),
    ("long", {"x": 1}, "too_long"),
    ("leak", {"x": 1}, "credential"),
    ("huge", {"x": 1}, "unserialisable"),
    ("die", {"x": 3}, "died"),
])
def test_every_failure_has_its_kind(tools, name, arguments, kind):
    call = tools.call("c", name, arguments)
    assert call.kind == kind and (call.error is None) == (kind is None)


def test_a_turn_is_invalid_by_the_errors_kind_not_by_its_words(tmp_path):
    # a tool whose own failure reads like the policy's: the prefixes once decided, and wrongly
    path = tmp_path / "tools.py"
    path.write_text(f"def f(a: int) -> int:\n{DOC}\ndef g(a: int) -> int:\n{DOCSTRING}    raise ValueError()\n"
                    "g.__name__ = 'bad arguments for'\nTOOLS = [f, g]\n")
    process = ToolProcess(path)
    try:
        episode = ToolEpisode(process)
        episode.reset({"prompt": "q"})
        answers = episode.step(call_text("bad arguments for", {"a": 1}))[0]
        assert answers[0]["content"].startswith("error: bad arguments for raised ValueError") and not episode.invalid
        episode.step(call_text("f", {"a": "x"}))
        assert episode.invalid and episode.last_calls[0].kind == "bad_arguments"
    finally:
        process.close()


SURROGATES = '''
def lone(x: int) -> str:
    """Return text with a lone surrogate.

    Args:
        x: anything
    """
    return "x\\ud800y"


def shout(x: int) -> int:
    """Raise with a lone surrogate in the message.

    Args:
        x: anything
    """
    raise ValueError("bad \\udfff")
'''


@pytest.mark.parametrize("name", ["lone", "shout"])
def test_a_lone_surrogate_a_tool_returns_or_raises_is_stored_as_its_escape(tmp_path, name):
    """Issue 59, item 1's third text from the tool's side: "\\ud800" in a result or an error
    would fail the store (no UTF-8 file holds it), so it reaches the run as its escape."""
    path = tmp_path / "tools.py"
    path.write_text(SURROGATES)
    process = ToolProcess(path)
    try:
        call = process.call("c", name, {"x": 1})
    finally:
        process.close()
    text = call.result if call.error is None else call.error
    assert ("\\ud800" if name == "lone" else "\\udfff") in text
    text.encode("utf-8")  # what the store writes


def test_rlab_run_refuses_a_tools_file_no_call_can_use_before_it_starts(tmp_path, capsys, monkeypatch):
    """Issue 59, item 6, through `rlab run`: the task's tools file is refused in one line naming
    the tool and the fix (after the build's announcement: the build reads the schemas first),
    exit 2, and the run file is not created."""
    from rlab.engine.cli.main import main

    monkeypatch.setenv("RLAB_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tools.py").write_text(f"def f(*args: int, **kw: int) -> int:\n{DOC}")
    (tmp_path / "rewards.py").write_text("def correct(example, completion):\n    return 1.0\n")
    rows = [{"prompt": f"{a} + 2?", "answer": str(a + 2)} for a in range(20)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "transcripts.jsonl").write_text(json.dumps({"messages": [
        {"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]}) + "\n")
    (tmp_path / "task.toml").write_text('train = "train.jsonl"\nrewards = "rewards.py"\ntools = "tools.py"\n'
                                        'transcripts = "transcripts.jsonl"\n')
    db = tmp_path / "runs.db"
    code = main(["run", "--headless", "--task", str(tmp_path / "task.toml"), "--db", str(db), "--max-steps", "1",
                 "--prompts-per-step", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("rlab: error:") and "Traceback" not in "".join(err), err
    assert "tool f in tools.py takes *args" in err[-1] and "name each argument" in err[-1]
    assert not db.exists()
