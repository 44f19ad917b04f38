"""No credential from the environment or the config reaches the file or an export."""

import pytest

from rlab.store.control import send_command
from rlab.store.export import export_run
from rlab.store.secrets import REDACTED, StreamScrubber, is_secret_key, scrub, scrub_text
from rlab.store.writer import StoreWriter
from test_store_helpers import make_group

ENV_KEY = "sk-envfake0123456789abcdefXYZ"
CONFIG_KEY = "cfg-not-in-env-7f3a9c"
PASSWORD = "hunter2hunter2"


@pytest.mark.parametrize("name", ["api_key", "OPENAI_API_KEY", "judge-api-key", "apikey",
                                  "secret", "client_secret", "password", "db_passwd", "token",
                                  "hf_token", "access_token", "Authorization", "private_key",
                                  "key"])
def test_credential_key_names(name):
    assert is_secret_key(name)


@pytest.mark.parametrize("name", ["max_tokens", "completion_tokens", "prompt_tokens",
                                  "max_new_tokens", "num_tokens", "token_count", "eos_token",
                                  "pad_token", "state_key", "sort_key", "keyword", "monkey",
                                  "tokenizer", "secretary_count"])
def test_non_credential_key_names(name):
    assert not is_secret_key(name)


def test_scrub_walks_nested_values():
    value = {"judge": {"api_key": "abc", "max_tokens": 512, "models": ["m", {"token": "t"}]},
             "note": f"called with {ENV_KEY} inline", "auth": ("Bearer abcdefghijklmnopqrstu",)}
    assert scrub(value, [ENV_KEY]) == {
        "judge": {"api_key": REDACTED, "max_tokens": 512, "models": ["m", {"token": REDACTED}]},
        "note": f"called with {REDACTED} inline", "auth": [f"Bearer {REDACTED}"]}


def test_key_shaped_strings_are_redacted_without_env():
    assert scrub_text("use hf_abcdefghijklmnopqrstuvwx0 now", []) == f"use {REDACTED} now"


def test_a_stream_scrubber_catches_a_key_that_arrives_one_character_at_a_time():
    scrubber = StreamScrubber([ENV_KEY])
    passed = [scrubber.feed(c) for c in f"a {ENV_KEY} b\nc {ENV_KEY[:6]}"]
    assert "".join(passed) == f"a {REDACTED} b\n"  # the line in progress is held back
    assert scrubber.close() == f"c {ENV_KEY[:6]}"


def test_a_stream_scrubber_holds_whole_lines_back_for_a_secret_that_spans_lines():
    secret = "-----BEGIN KEY-----\nMIIEvQIBADANBg\n-----END KEY-----"
    scrubber = StreamScrubber([secret])
    text = "x\n" * 10 + secret + "\ny\n"
    passed = "".join(scrubber.feed(text[i:i + 7]) for i in range(0, len(text), 7)) + scrubber.close()
    assert passed == "x\n" * 10 + f"{REDACTED}\ny\n"


def test_no_secret_in_db_or_export(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)
    path = tmp_path / "runs.db"
    config = {"judge": {"base_url": "http://127.0.0.1:9/v1", "api_key": CONFIG_KEY,
                        "max_tokens": 256},
              "env_echo": ENV_KEY, "notes": [f"pw={PASSWORD}"]}
    manifest = {"sampling": {"max_tokens": 256}, "judge_api_key": CONFIG_KEY, "seed": 1,
                "cmdline": f"rlab run --judge-key {ENV_KEY}"}
    with StoreWriter(path) as writer:
        run_id = writer.start_run("s", "arithmetic", config, manifest)
        writer.write_group(run_id, 0, make_group(0))
        writer.write_event(run_id, "error", {"message": f"401 for key {ENV_KEY}",
                                             "headers": {"Authorization": f"Bearer {ENV_KEY}"}})
        writer.write_judge_call(run_id, None, request_hash="h", model="m",
                                raw_response=f"echo {ENV_KEY}", error=f"bad key {ENV_KEY}")
        writer.write_reward_version(run_id, 1, f"KEY = '{ENV_KEY}'\nWEIGHTS = {{}}\n", {})
        command_id = send_command(path, run_id, "set_rewards",
                                  {"source": f"# {PASSWORD}", "weights": {"correct": 1.0}})
        writer.resolve_command(command_id, "rejected", f"cannot use {PASSWORD}")
        stored_config = writer.db.execute("SELECT config FROM runs").fetchone()[0]
        export = export_run(path, run_id, tmp_path / "out")
    # Token counts survive scrubbing; secrets do not.
    assert '"max_tokens":256' in stored_config
    files = [path, *path.parent.glob("runs.db-*"), *export.values()]
    for file in files:
        data = file.read_bytes()
        for secret in (ENV_KEY, CONFIG_KEY, PASSWORD):
            assert secret.encode() not in data, f"{secret} leaked into {file.name}"
    assert b"REDACTED" in path.read_bytes()
