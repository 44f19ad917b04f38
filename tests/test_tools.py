"""Tools in a task (issue 45): calls parsed from text, the prompt with tools, the
isolated tool process and its failures, the tool episode, and what the store keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from rlab.engine.policy.tiny import embedded_dir
from rlab.engine.tools.calls import assistant_message, call_text, parse_turn, template_messages
from rlab.engine.tools.episode import NO_TOOLS, ToolEpisode
from rlab.engine.tools.process import ToolProcess, ToolsError
from rlab.engine.tools.render import TOOLS_HEADER, convention_messages, supports_tools, tool_prompt
from rlab.engine.types import ToolCall
from rlab.scenarios.calculator import SCENARIO as CALCULATOR

BAD_TOOLS = Path(__file__).parent / "fixtures" / "tools" / "bad_tools.py"
SECRET = "sk-test-0123456789abcdefSECRET"


# -- calls ---------------------------------------------------------------------------------

def test_a_canonical_call_parses_and_renders_back_to_the_same_text():
    text = call_text("multiply", {"a": 482, "b": 377})
    parsed = parse_turn(text)
    assert parsed.content == "" and [(c.name, c.arguments, c.problem) for c in parsed.calls] == [
        ("multiply", {"a": 482, "b": 377}, None)]
    message = assistant_message(parsed.content, [ToolCall("call_0_0", "multiply", {"a": 482, "b": 377})])
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"a": 482, "b": 377}
    assert convention_messages([message], [{"type": "function", "function": {"name": "multiply"}}])[1][
        "content"] == text


@pytest.mark.parametrize("text, problem", [
    ("<tool_call>{not json}</tool_call>", "not valid JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', 'no "name"'),
    ('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>', "must be an object"),
    ('<tool_call>{"name": "add", "arguments": "{oops"}</tool_call>', "not a JSON object"),
    ('<tool_call>{"name": "add", "arguments": {"a": 1', "not closed"),
    ('<tool_call>{"name": "add", "arguments": {"a": "x}</tool_call>', "Unterminated string starting at character"),
    # legal JSON that Python's json module cannot take (issue 59): each is the turn's error, not the run's
    ('<tool_call>{"name": "add", "arguments": {"a": ' + "[" * 1000 + "]" * 1000 + "}}</tool_call>", "too deeply"),
    ('<tool_call>{"name": "add", "arguments": {"a": ' + "7" * 4301 + "}}</tool_call>", "4300 digits"),
    ('<tool_call>{"name": "add", "arguments": {"a": "\\ud800"}}</tool_call>', "lone surrogate"),
    # the same inside an "arguments" string, which is parsed again (the nesting escaped there as a RecursionError)
    ('<tool_call>{"name": "add", "arguments": "{\\"a\\": ' + "[" * 1000 + "]" * 1000 + '}"}</tool_call>',
     "not a JSON object: it nests its JSON too deeply"),
    ('<tool_call>{"name": "add", "arguments": "{\\"a\\": ' + "7" * 4301 + '}"}</tool_call>', "4300 digits"),
    ('<tool_call>{"name": "add", "arguments": "{\\"a\\": \\"\\\\ud800\\"}"}</tool_call>', "lone surrogate"),
])
def test_a_malformed_call_is_a_call_with_a_problem_never_an_exception(text, problem):
    [call] = parse_turn(text).calls
    assert call.problem is not None and problem in call.problem


def test_a_list_of_calls_in_one_block_and_arguments_as_json_text_parse():
    parsed = parse_turn('Let me see. <tool_call>[{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}, '
                        '{"name": "multiply", "arguments": {"a": 3, "b": 4}}]</tool_call>')
    assert parsed.content == "Let me see."
    assert [(c.name, c.arguments) for c in parsed.calls] == [("add", {"a": 1, "b": 2}), ("multiply", {"a": 3, "b": 4})]


def test_a_turn_without_a_block_is_an_answer():
    assert parse_turn("The answer is 42.").calls == []


@pytest.mark.parametrize("text, call", [
    ('{"name": "add", "parameters": {"a": 1, "b": 2}}', ("add", {"a": 1, "b": 2}, None)),
    (' {"name": "add", "arguments": "{\\"a\\": 1}"}\n', ("add", {"a": 1}, None)),
    ('{"name": "add", "parameters": [1, 2]}', ("add", {}, '"arguments" must be an object, got list')),
])
def test_a_turn_that_is_one_bare_json_call_is_that_call(text, call):
    """Llama 3.1's form: no tags, the whole turn one object of a name and its parameters."""
    parsed = parse_turn(text)
    assert parsed.content == "" and [(c.name, c.arguments, c.problem) for c in parsed.calls] == [call]


@pytest.mark.parametrize("text", [
    '{"name": "Ada", "age": 36}',  # other keys: an answer that is JSON
    'Call: {"name": "add", "parameters": {"a": 1}}',  # text around it
    '{"name": "add", "parameters": {"a": 1}} {"name": "add", "parameters": {"a": 2}}',
    '{"name": "add", "parameters": {"a": 1}',
])
def test_json_that_is_not_one_bare_call_is_an_answer(text):
    assert parse_turn(text).calls == []


def test_llama_3_1_s_template_writes_a_parsed_bare_call_back_as_the_model_wrote_it():
    trl = pytest.importorskip("trl")  # ships Llama 3.1's chat template
    template = (Path(trl.__file__).parent / "chat_templates" / "llama3_1.jinja").read_text()
    written = '{"name": "add", "parameters": {"a": 1, "b": 2}}'
    [call] = parse_turn(written).calls
    message = assistant_message("", [ToolCall("call_0_0", call.name, call.arguments)])
    messages, tools = tool_prompt([{"role": "user", "content": "1+2?"}, message], SCHEMA, template)
    tokenizer = AutoTokenizer.from_pretrained(embedded_dir("arithmetic"))
    rendered = tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False)
    assert rendered.endswith(f"<|start_header_id|>assistant<|end_header_id|>\n\n{written}<|eot_id|>")


# -- rendering -------------------------------------------------------------------------------

SCHEMA = [{"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]


def test_a_template_without_tools_gets_the_convention():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+2?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
                {"role": "tool", "tool_call_id": "c0", "name": "add", "content": "3"},
                {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "error: boom"}]
    shown, offered = tool_prompt(messages, SCHEMA, "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert offered is None
    assert shown[0]["content"].startswith("Be brief.\n\n" + TOOLS_HEADER) and json.dumps(SCHEMA[0]) in shown[0]["content"]
    assert shown[2] == {"role": "assistant", "content": call_text("add", {"a": 1, "b": 2})}
    assert shown[3] == {"role": "user", "content": "<tool_response>\n3\n</tool_response>\n"
                                                    "<tool_response>\nerror: boom\n</tool_response>"}
    assert len(shown) == 4  # the two results are one user message


def test_a_template_with_tools_gets_the_tools_and_arguments_as_objects():
    template = "{{ tools }}{% for m in messages %}{{ m.tool_calls }}{% endfor %}"
    assert supports_tools(template)
    messages = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]}]
    shown, offered = tool_prompt(messages, SCHEMA, template)
    assert offered == SCHEMA and shown[0]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert template_messages(messages)[0] is not messages[0]  # the caller's messages are not changed
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'


def test_no_tools_leaves_the_messages_alone():
    messages = [{"role": "user", "content": "hi"}]
    assert tool_prompt(messages, None, "x") == (messages, None)


# -- the tool process ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bad_tools():
    process = ToolProcess(BAD_TOOLS, timeout_s=1.0, result_chars=1000, memory_mb=1024)
    yield process
    process.close()


def test_schemas_come_from_the_signatures_and_docstrings(bad_tools):
    [add] = [s for s in bad_tools.schemas if s["function"]["name"] == "add"]
    assert add["function"]["parameters"]["properties"]["a"] == {"type": "integer", "description": "the first addend"}
    assert bad_tools.names[:2] == ["add", "boom"]


def test_a_good_call_returns_its_result_with_its_seconds(bad_tools):
    call = bad_tools.call("c", "add", {"a": 2, "b": "3"})  # "3" is an int 3 (lax, as pydantic reads it)
    assert (call.result, call.error) == ("5", None) and 0 <= call.seconds < 1


@pytest.mark.parametrize("name, arguments, error", [
    ("boom", {"x": 1}, "boom raised RuntimeError: boom 1"),
    ("add", {"a": "x", "b": 1}, "bad arguments for add: a: Input should be a valid integer"),
    ("add", {"a": 1}, "bad arguments for add: b: Missing required argument"),
    ("add", {"a": 1, "b": 2, "c": 3}, "bad arguments for add: c: Unexpected keyword argument"),
    ("nope", {}, "no tool named 'nope'; the tools: add, boom"),
    ("big", {"x": 1}, "big returned 10,000,000 characters, over the limit of 1,000"),
    ("hog", {"x": 1}, "hog raised MemoryError"),
])
def test_a_bad_call_is_one_error_message_and_the_process_serves_on(bad_tools, name, arguments, error):
    call = bad_tools.call("c", name, arguments)
    assert call.result == "" and call.error is not None and call.error.startswith(error)
    assert bad_tools.call("c", "add", {"a": 1, "b": 1}).result == "2"


@pytest.mark.parametrize("name", ["hang", "spin"])
def test_a_call_past_its_time_limit_is_an_error_and_the_process_is_replaced(bad_tools, name):
    before = bad_tools.child.replaced
    call = bad_tools.call("c", name, {"x": 1})
    assert call.error == f"{name} did not return within 1 s"
    assert bad_tools.child.replaced == before + 1
    assert bad_tools.call("c", "add", {"a": 1, "b": 1}).result == "2"


def test_a_tool_that_leaks_a_credential_is_an_error_and_the_secret_goes_nowhere(monkeypatch, capfd):
    monkeypatch.setenv("RLAB_TEST_API_KEY", SECRET)
    process = ToolProcess(BAD_TOOLS, timeout_s=2.0)
    try:
        printed = process.call("c", "leak", {"x": 0})  # prints it
        returned = process.call("c", "leak", {"x": 1})  # returns it
    finally:
        process.close()
    for call in (printed, returned):
        assert call.result == "" and "held a credential" in (call.error or "")
    out = capfd.readouterr()
    assert SECRET not in out.out + out.err and "[tool leak printed]" in out.err


def test_a_tools_file_that_does_not_load_is_named_before_a_run(tmp_path):
    broken = tmp_path / "tools.py"
    broken.write_text("def add(a, b):\n    return a + b\n")
    with pytest.raises(ToolsError, match="tool add in tools.py: .*docstring"):
        ToolProcess(broken).schemas
    broken.write_text("x = 1 +\n")
    with pytest.raises(ToolsError, match="SyntaxError in tools.py line 1"):
        ToolProcess(broken).schemas
    broken.write_text("X = 1\n")
    with pytest.raises(ToolsError, match="defines no tool"):
        ToolProcess(broken).schemas


# -- the episode --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def calculator_tools():
    process = ToolProcess(CALCULATOR.tools_file)
    yield process
    process.close()


def test_an_episode_runs_its_calls_and_ends_on_an_answer(calculator_tools):
    episode = ToolEpisode(calculator_tools)
    observation, start = episode.reset({"prompt": "What is 482 * 377?"})
    assert observation == [{"role": "user", "content": "What is 482 * 377?"}]
    answers, reward, done, key = episode.step(call_text("multiply", {"a": 482, "b": 377}))
    assert answers == [{"role": "tool", "tool_call_id": "call_0_0", "name": "multiply", "content": "181714"}]
    assert (reward, done, episode.invalid) == (0.0, False, False) and key != start
    assert episode.last_message["tool_calls"][0]["id"] == "call_0_0"
    answers, _, done, _ = episode.step("181714")
    assert answers == [] and done and episode.last_message == {"role": "assistant", "content": "181714"}


def test_identical_calls_reach_the_same_anchor_state(calculator_tools):
    keys = []
    for wording in ("", "Let me multiply."):
        episode = ToolEpisode(calculator_tools)
        episode.reset({"prompt": "q"})
        keys.append(episode.step(f"{wording}{call_text('add', {'a': 1, 'b': 2})}")[3])
    assert keys[0] == keys[1]


def test_a_malformed_call_or_an_unknown_tool_is_invalid_and_answered(calculator_tools):
    episode = ToolEpisode(calculator_tools)
    episode.reset({"prompt": "q"})
    answers, _, done, _ = episode.step('<tool_call>{"name": "divide", "arguments": {}}</tool_call><tool_call>oops</tool_call>')
    assert not done and episode.invalid
    assert answers[0]["role"] == "tool" and answers[0]["content"].startswith("error: no tool named 'divide'")
    assert answers[1]["role"] == "user" and "not valid JSON" in answers[1]["content"]
    assert '"name": TOOL' in answers[1]["content"]  # and what to write instead


def test_without_tools_every_call_is_told_so():
    episode = ToolEpisode(None)
    episode.reset({"prompt": "q"})
    answers, _, done, _ = episode.step(call_text("add", {"a": 1, "b": 2}))
    assert answers[0]["content"] == f"error: {NO_TOOLS}" and not done
