"""A stand-in for ``python -m vllm.entrypoints.openai.api_server``: the loopback fake on ``--port``.

Used by tests/test_vllm_launch.py through a wrapper "Python" that puts
tests/fake_vllm first on PYTHONPATH. It logs its flags and the vLLM
environment variables, as vLLM logs its non-default args, so tests can check
what rlab passed; ``FAKE_VLLM_EXIT=N`` makes it exit with status N at start
(a server that dies before it is healthy); ``FAKE_VLLM_DELAY_S`` waits before
listening (a slow start).
"""

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # tests/, for vllm_server (a package may ship "tests")

from vllm_server import VLLMServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, rest = parser.parse_known_args()
    print(f"fake vllm: model={args.model} port={args.port} flags={' '.join(rest)}", flush=True)
    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_ALLOW_RUNTIME_LORA_UPDATING"):
        print(f"fake vllm: {name}={os.environ.get(name)}", flush=True)
    if os.environ.get("FAKE_VLLM_EXIT"):
        print("fake vllm: RuntimeError: engine core failed to start", flush=True)
        return int(os.environ["FAKE_VLLM_EXIT"])
    time.sleep(float(os.environ.get("FAKE_VLLM_DELAY_S", "0")))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with VLLMServer(args.model, port=args.port, vocab=40):
        print("INFO:     Application startup complete.", flush=True)
        stop.wait()
    print("fake vllm: shut down", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
