"""RulerJudge against a real Chat Completions server on 127.0.0.1."""

import json
from types import SimpleNamespace

import pytest
from judge_server import ChatCompletionsServer, Reply, scores_json

from rlab.engine.rewards.judge.prompt import DEFAULT_RUBRIC, build_judge_messages
from rlab.engine.rewards.judge.ruler import RulerJudge
from rlab.engine.rewards.judge.cache import request_hash

SYSTEM = {"role": "system", "content": "You answer customer emails for Northwind Home."}
USER = {"role": "user", "content": "My kettle arrived broken. What now?"}
GROUP = [
    [SYSTEM, USER, {"role": "assistant", "content": "Sorry! A replacement ships today."}],
    [SYSTEM, USER, {"role": "assistant", "content": "Not our problem."}],
    [SYSTEM, USER, {"role": "assistant", "content": "Please send a photo and we will refund you."}],
]
SECRET = "sk-test-do-not-leak"


def build_messages(group):
    return build_judge_messages(group, DEFAULT_RUBRIC, answer_in_prompt=False)


def make_judge(server, tmp_path, **overrides):
    # 5 s: a loopback answer on a loaded 2-core box took over 0.5 s and was retried;
    # the time-out tests set their own
    options = dict(model="judge-test", base_url=server.base_url, api_key=SECRET,
                   timeout_s=5.0,
                   use_cache=False, cache_dir=tmp_path / "cache")
    options.update(overrides)
    return RulerJudge(**options)


async def judge_once(replies, tmp_path, *, reject_response_format=False, **overrides):
    with ChatCompletionsServer(replies, reject_response_format=reject_response_format) as server:
        async with make_judge(server, tmp_path, **overrides) as judge:
            result = await judge.score_group(GROUP)
    return result, server


async def test_valid_answer_and_prompt_layout(tmp_path):
    answer = scores_json({"1": 0.9, "2": 0.1, "3": 0.6})
    result, server = await judge_once([Reply(content=answer)], tmp_path)
    assert result.ok and result.status == "ok"
    assert result.scores == pytest.approx([0.9, 0.1, 0.6])
    assert result.explanations == ["ok 1", "ok 2", "ok 3"]
    assert result.ranks == [1, 3, 2]
    assert (result.attempts, result.prompt_tokens, result.completion_tokens) == (1, 100, 20)
    assert result.error is None and result.raw == answer and result.scale == 1
    assert result.cost_usd is None and not result.cached
    assert result.latency_s > 0

    (body,) = server.requests
    assert body["model"] == "judge-test"
    assert body["response_format"]["type"] == "json_schema"
    system, user = body["messages"]
    assert DEFAULT_RUBRIC in system["content"]
    assert '"trajectory_id"' in system["content"]  # even servers ignoring the schema see it
    prompt = user["content"]
    # the shared prefix is sent once, as context; each remainder is tagged
    assert prompt.count(SYSTEM["content"]) == 1 and prompt.count(USER["content"]) == 1
    assert prompt.index("<context>") < prompt.index('<trajectory id="1">')
    for k, trajectory in enumerate(GROUP, start=1):
        tagged = prompt.split(f'<trajectory id="{k}">')[1].split("</trajectory>")[0]
        assert json.loads(tagged.strip()) == trajectory[-1]
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(result) and SECRET not in repr(make_judge(server, tmp_path))


async def test_scores_matched_by_id_not_position(tmp_path):
    answer = json.dumps({"scores": [
        {"trajectory_id": "3", "explanation": "photo", "score": 0.5},
        {"trajectory_id": 1, "explanation": "replacement", "score": 1.0},
        {"trajectory_id": "2", "explanation": "rude", "score": 0.0},
    ]})
    result, _ = await judge_once([Reply(content=answer)], tmp_path)
    assert result.scores == [1.0, 0.0, 0.5]
    assert result.explanations == ["replacement", "rude", "photo"]


async def test_missing_id_is_retried(tmp_path):
    replies = [Reply(content=scores_json({"1": 0.9, "3": 0.2})),
               Reply(content=scores_json({"1": 0.9, "2": 0.1, "3": 0.2}))]
    result, server = await judge_once(replies, tmp_path)
    assert result.scores == pytest.approx([0.9, 0.1, 0.2])
    assert result.attempts == 2 and len(server.requests) == 2
    assert "missing: ['2']" in result.attempt_errors[0]
    assert result.prompt_tokens == 200  # the failed attempt was billed too


async def test_missing_id_until_retries_run_out(tmp_path):
    result, server = await judge_once([Reply(content=scores_json({"1": 0.9}))], tmp_path,
                                      max_retries=1)
    assert result.scores is None and result.status == "failed"
    assert "missing: ['2', '3']" in result.error and len(server.requests) == 2
    assert result.raw == scores_json({"1": 0.9})


@pytest.mark.parametrize(("given", "scale"), [((8, 3, 10), 10), ((85, 30, 100), 100)])
async def test_out_of_range_scales_are_rescaled(tmp_path, given, scale):
    answer = scores_json(dict(zip("123", given)))
    result, _ = await judge_once([Reply(content=answer)], tmp_path)
    assert result.scale == scale
    assert result.scores == pytest.approx([g / scale for g in given])


async def test_negative_score_is_invalid(tmp_path):
    result, server = await judge_once([Reply(content=scores_json({"1": -1, "2": 0, "3": 1}))],
                                      tmp_path, reasks=0)
    assert result.scores is None and "got [-1.0]" in result.error and len(server.requests) == 1


async def test_prose_and_fences_around_json(tmp_path):
    answer = ("Let me compare {the three} replies.\n```json\n"
              + scores_json({"1": 0.8, "2": 0.0, "3": 0.5})
              + "\n```\nHope this helps! {not json}")
    result, _ = await judge_once([Reply(content=answer)], tmp_path)
    assert result.scores == pytest.approx([0.8, 0.0, 0.5]) and result.attempts == 1


async def test_invalid_json_is_retried_then_reported(tmp_path):
    broken = '{"scores": [{"trajectory_id": "1", "score": 0.5,'
    result, _ = await judge_once([Reply(content=broken), Reply(content=scores_json(
        {"1": 0.5, "2": 0.2, "3": 0.1}))], tmp_path)
    assert result.ok and result.attempts == 2
    assert "no JSON object" in result.attempt_errors[0]

    result, server = await judge_once([Reply(content=broken)], tmp_path, max_retries=2)
    assert result.scores is None and len(server.requests) == 2  # one re-ask by default, whatever max_retries
    assert "judge failed after 2 attempt(s): no JSON object" in result.error
    assert result.raw == broken

    result, server = await judge_once([Reply(content=broken)], tmp_path, max_retries=0, reasks=3)
    assert result.scores is None and len(server.requests) == 4


async def test_a_bad_answer_behind_server_errors_costs_at_most_reasks_plus_one_times_retries_plus_one(tmp_path):
    """Issue 58: the judge re-asked max_retries times on top of the client's max_retries,
    (n+1)^2 requests for one group; now (reasks+1) x (max_retries+1) at most."""
    broken = '{"scores": ['
    replies = [Reply(status=500, error="busy"), Reply(content=broken)] * 10
    result, server = await judge_once(replies, tmp_path, max_retries=3)
    assert result.scores is None and len(server.requests) == 4  # (500, bad) x (1 + 1 re-ask)


async def test_rate_limit_then_success(tmp_path):
    replies = [Reply(status=429, error="Rate limit reached", headers={"retry-after": "0.02"}),
               Reply(content=scores_json({"1": 0.7, "2": 0.3, "3": 0.5}))]
    result, server = await judge_once(replies, tmp_path)
    assert result.ok and result.attempts == 2 and len(server.requests) == 2
    assert result.attempt_errors == ["HTTP 429: Rate limit reached"]


async def test_server_error_until_retries_run_out(tmp_path):
    result, server = await judge_once([Reply(status=500, error="model crashed")], tmp_path,
                                      max_retries=2)
    assert result.scores is None and result.explanations == []
    assert len(server.requests) == 3 and result.attempts == 3
    assert result.error == "judge failed after 3 attempt(s): HTTP 500: model crashed"
    assert len(result.attempt_errors) == 3


async def test_time_out_is_retried(tmp_path):
    slow = Reply(content=scores_json({"1": 1, "2": 0, "3": 0}), delay_s=1.0)
    result, server = await judge_once([slow], tmp_path, timeout_s=0.2, max_retries=1)
    assert result.scores is None and "timed out" in result.error
    # each attempt cut at 0.2 s, plus the client's wait of at most 0.5 s: not two 1 s answers
    assert len(server.requests) == 2 and result.latency_s < 1.5


async def test_a_server_that_times_out_twice_then_answers_is_retried_by_the_client(tmp_path, monkeypatch):
    """Issue 46, 4: the openai client retries time-outs; the judge's own loop sends one request and never sleeps."""
    from rlab.engine.rewards.judge import ruler

    sent, slept = [], []
    attempt = ruler.RulerJudge._attempt

    async def counted(self, *args, **kwargs):
        sent.append(1)
        return await attempt(self, *args, **kwargs)

    async def sleep(seconds, *args):
        slept.append(seconds)

    monkeypatch.setattr(ruler.RulerJudge, "_attempt", counted)
    no_sleep = SimpleNamespace(**vars(ruler.asyncio))
    no_sleep.sleep = sleep
    monkeypatch.setattr(ruler, "asyncio", no_sleep)
    slow = Reply(content=scores_json({"1": 1, "2": 0, "3": 0}), delay_s=1.0)
    fast = Reply(content=scores_json({"1": 1, "2": 0, "3": 0.5}))
    result, server = await judge_once([slow, slow, fast], tmp_path, timeout_s=0.2, max_retries=2)
    assert result.scores == [1.0, 0.0, 0.5] and result.attempts == 3 and len(server.requests) == 3
    assert result.attempt_errors == ["request timed out", "request timed out"]
    assert sent == [1] and slept == []


async def test_a_server_that_refuses_structured_output_without_naming_it_still_judges(tmp_path):
    """Any 400/422 to a structured request: one retry with JSON asked for in the prompt, remembered (issue 33)."""
    answer = scores_json({"1": 0.9, "2": 0.0, "3": 0.4})
    refusal = Reply(status=422, error="Unprocessable Entity")
    with ChatCompletionsServer([Reply(content=answer)], reject_response_format=refusal) as server:
        async with make_judge(server, tmp_path) as judge:
            result = await judge.score_group(GROUP)
            again = await judge.score_group(GROUP)
    assert result.ok and again.ok and result.scores == pytest.approx([0.9, 0.0, 0.4])
    assert ["response_format" in r for r in server.requests] == [True, False, False]


async def test_the_answer_cache_is_per_server(tmp_path):
    """Runs against another base URL were scored from the first server's cached answers (issue 33)."""
    first, second = scores_json({"1": 0.9, "2": 0.0, "3": 0.4}), scores_json({"1": 0.1, "2": 1.0, "3": 0.5})
    with ChatCompletionsServer([Reply(content=first)]) as one, ChatCompletionsServer([Reply(content=second)]) as two:
        async with make_judge(one, tmp_path, use_cache=True) as judge:
            assert (await judge.score_group(GROUP)).scores == pytest.approx([0.9, 0.0, 0.4])
        async with make_judge(two, tmp_path, use_cache=True) as judge:
            assert (await judge.score_group(GROUP)).scores == pytest.approx([0.1, 1.0, 0.5])
        async with make_judge(one, tmp_path, use_cache=True) as judge:  # the first server's answer is cached
            assert (await judge.score_group(GROUP)).response_mode == "cache"
    assert (len(one.requests), len(two.requests)) == (1, 1)


async def test_empty_scores_list(tmp_path):
    result, server = await judge_once([Reply(content='{"scores": []}')], tmp_path,
                                      max_retries=1)
    assert result.scores is None and "empty list" in result.error
    assert len(server.requests) == 2


async def test_server_rejecting_response_format_falls_back_to_prompt(tmp_path):
    answer = scores_json({"1": 0.9, "2": 0.0, "3": 0.4})
    with ChatCompletionsServer([Reply(content=answer)], reject_response_format=True) as server:
        async with make_judge(server, tmp_path) as judge:
            result = await judge.score_group(GROUP)
            again = await judge.score_group(GROUP)
    assert result.scores == pytest.approx([0.9, 0.0, 0.4]) and again.ok
    assert result.attempts == 2 and "response_format" in result.attempt_errors[0]
    assert "response_format" in server.requests[0]
    assert "response_format" not in server.requests[1]
    assert '"trajectory_id"' in server.requests[1]["messages"][1]["content"]
    # the switch sticks: the second group is sent once, without response_format
    assert len(server.requests) == 3 and "response_format" not in server.requests[2]


async def test_permanent_http_error_fails_at_once(tmp_path):
    result, server = await judge_once([Reply(status=401, error="Incorrect API key")], tmp_path)
    assert result.error.startswith("judge failed after 1 attempt(s): HTTP 401: Incorrect API key")
    assert "OPENAI_API_KEY" in result.error and len(server.requests) == 1


async def test_unreachable_server_is_retried_then_reported(tmp_path):
    with ChatCompletionsServer([Reply()]) as server:
        base_url = server.base_url  # the port is closed once the server has stopped
    async with RulerJudge("judge-test", base_url=base_url, max_retries=1, timeout_s=0.5,
                          use_cache=False) as judge:
        result = await judge.score_group(GROUP)
    assert result.attempts == 2 and "connection failed" in result.error


async def test_answers_are_cached_and_failures_are_not(tmp_path):
    answer = scores_json({"1": 0.9, "2": 0.1, "3": 0.6})
    with ChatCompletionsServer([Reply(status=500), Reply(content=answer)]) as server:
        async with make_judge(server, tmp_path, max_retries=0, use_cache=True) as judge:
            failed = await judge.score_group(GROUP)
            first = await judge.score_group(GROUP)
        async with make_judge(server, tmp_path, use_cache=True) as judge:
            second = await judge.score_group(GROUP)
    assert failed.scores is None and first.ok and len(server.requests) == 2
    assert second.cached and second.attempts == 0 and second.prompt_tokens == 0
    assert second.scores == first.scores and second.raw == answer
    assert second.request_hash == first.request_hash == failed.request_hash
    assert (tmp_path / "cache" / f"{first.request_hash}.json").is_file()


async def test_cache_key_depends_on_rubric(tmp_path):
    answer = scores_json({"1": 0.9, "2": 0.1, "3": 0.6})
    with ChatCompletionsServer([Reply(content=answer)]) as server:
        async with make_judge(server, tmp_path, use_cache=True) as judge:
            first = await judge.score_group(GROUP)
        async with make_judge(server, tmp_path, use_cache=True, rubric="Be terse.") as judge:
            other = await judge.score_group(GROUP)
    assert not other.cached and other.request_hash != first.request_hash
    assert "Be terse." in server.requests[1]["messages"][0]["content"]


async def test_cost_from_price_table(tmp_path):
    answer = scores_json({"1": 0.9, "2": 0.1, "3": 0.6})
    result, _ = await judge_once([Reply(content=answer, usage=(1000, 200))], tmp_path,
                                 prices={"judge-test": (2.0, 8.0)})
    assert result.cost_usd == pytest.approx((1000 * 2.0 + 200 * 8.0) / 1e6)


@pytest.mark.parametrize(("env_key", "sent"), [("sk-from-env", "sk-from-env"), (None, "EMPTY")])
async def test_api_key_fallback(tmp_path, monkeypatch, env_key, sent):
    if env_key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", env_key)
    answer = scores_json({"1": 0.9, "2": 0.1, "3": 0.6})
    _, server = await judge_once([Reply(content=answer)], tmp_path, api_key=None)
    assert server.headers[0]["authorization"] == f"Bearer {sent}"


def test_sync_wrapper(tmp_path):
    answer = scores_json({"1": 0.2, "2": 0.4, "3": 0.6})
    with ChatCompletionsServer([Reply(content=answer)]) as server:
        with make_judge(server, tmp_path) as judge:
            result = judge.score_group_sync(GROUP)
            again = judge.score_groups_sync([GROUP, GROUP])
    assert result.scores == pytest.approx([0.2, 0.4, 0.6])
    assert [r.scores for r in again] == [result.scores] * 2
    # the client is kept between sync calls: the first call's connection is reused
    assert len(server.requests) == 3 and server.client_ports[0] in server.client_ports[1:]


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="max_retries"):
        RulerJudge("m", max_retries=-1)
    with pytest.raises(ValueError, match="timeout_s"):
        RulerJudge("m", timeout_s=0)
    with pytest.raises(ValueError, match="model"):
        RulerJudge("")


async def test_groups_are_scored_concurrently_in_order(tmp_path):
    answer = scores_json({"1": 0.1, "2": 0.2, "3": 0.3})
    groups = [[t[:-1] + [{"role": "assistant", "content": f"{t[-1]['content']} #{g}"}]
               for t in GROUP] for g in range(4)]
    with ChatCompletionsServer([Reply(content=answer, delay_s=0.2)]) as server:
        async with make_judge(server, tmp_path) as judge:
            results = await judge.score_groups(groups, max_concurrency=2)
    assert [r.scores for r in results] == [[0.1, 0.2, 0.3]] * 4
    assert server.max_in_flight == 2 and len(server.requests) == 4
    # each result belongs to its own group's request
    for group, result in zip(groups, results):
        sent = next(b for b in server.requests if b["messages"] == build_messages(group))
        assert result.request_hash == request_hash({**sent, "rubric": DEFAULT_RUBRIC, "base_url": server.base_url})


def test_call_fields_match_the_store_writer(tmp_path):
    from rlab.store.writer import StoreWriter

    answer = scores_json({"1": 0.9, "2": 0.1, "3": 0.6})
    with ChatCompletionsServer([Reply(content=answer)]) as server:
        with make_judge(server, tmp_path, prices={"judge-test": (1.0, 1.0)}) as judge:
            result = judge.score_group_sync(GROUP)
    with StoreWriter(tmp_path / "run.db") as writer:
        run_id = writer.start_run("judge-test-run", "support_replies", {}, {})
        call_id = writer.write_judge_call(run_id, None, step=0, **result.call_fields())
        row = writer.db["judge_calls"].get(call_id)
    assert (row["prompt_tokens"], row["completion_tokens"], row["raw_response"]) == (
        100, 20, answer)
    assert row["cost_usd"] == pytest.approx(120 / 1e6) and row["error"] is None


async def test_the_schema_pins_the_group_and_max_tokens_bounds_the_answer(tmp_path):
    from rlab.engine.rewards.judge.answer import EXPLANATION_MAX_CHARS, answer_token_budget

    result, server = await judge_once([Reply(content=scores_json({"1": 1, "2": 0, "3": 0.5}))], tmp_path)
    (body,) = server.requests
    schema = body["response_format"]["json_schema"]["schema"]
    scores = schema["properties"]["scores"]
    assert (scores["minItems"], scores["maxItems"]) == (3, 3)
    entry = schema["$defs"]["ScoredTrajectory"]["properties"]
    assert entry["trajectory_id"]["enum"] == ["1", "2", "3"]
    assert entry["explanation"]["maxLength"] == EXPLANATION_MAX_CHARS
    assert (entry["score"]["minimum"], entry["score"]["maximum"]) == (0, 1)
    assert body["max_tokens"] == answer_token_budget(3) < answer_token_budget(8)
    assert result.response_mode == "json_schema"


async def test_each_call_records_its_response_mode(tmp_path):
    answer = scores_json({"1": 0.9, "2": 0.1, "3": 0.6})
    with ChatCompletionsServer([Reply(content=answer)] * 2, reject_response_format=True) as server:
        async with make_judge(server, tmp_path, use_cache=True) as judge:
            refused = await judge.score_group(GROUP)
            cached = await judge.score_group(GROUP)
    assert (refused.response_mode, refused.attempts) == ("prompt", 2)
    assert "max_tokens" in server.requests[1] and "response_format" not in server.requests[1]
    assert cached.cached and cached.response_mode == "cache" and len(server.requests) == 2


def test_the_store_keeps_the_mode_attempts_and_the_group_shows_them(tmp_path):
    from rlab.store.reader import StoreReader
    from rlab.store.records import GroupRecord
    from rlab.store.writer import StoreWriter
    from rlab.tui.group_view import judge_line

    answer = scores_json({"1": 0.9, "2": 0.1, "3": 0.6})
    with ChatCompletionsServer([Reply(content=answer)], reject_response_format=True) as server:
        with make_judge(server, tmp_path) as judge:
            result = judge.score_group_sync(GROUP)
    with StoreWriter(tmp_path / "run.db") as writer:
        run_id = writer.start_run("r", "support_replies", {}, {})
        group_id = writer.write_group(run_id, 1, GroupRecord(index=0, example_id=1, prompt="p", trajectories=[],
                                                             judge_status=result.status))
        writer.write_judge_call(run_id, group_id, step=1, **result.call_fields())
    with StoreReader(tmp_path / "run.db") as reader:
        group = reader.group(group_id)
    assert group is not None and group["judge_call"] is not None
    call = group["judge_call"]
    assert (call["response_mode"], call["attempts"], call["completion_tokens"]) == ("prompt", 2, 20)
    line = judge_line(dict(group))
    assert line.startswith("ok · ") and " s · " in line and "100+20 tokens · prompt · 2 attempts" in line
    assert judge_line({"judge_status": None, "judge_call": None}) == "no judge"
