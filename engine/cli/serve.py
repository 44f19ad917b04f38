"""``rlab serve``: a local vLLM server (OpenAI-compatible) for a model, until Ctrl-C."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlab.engine.cli.parsers import Command, Subparsers


def add_parsers(sub: Subparsers) -> None:
    """Add ``serve`` to ``sub``."""
    serve = sub.add_parser("serve", help="start a local vLLM server (OpenAI-compatible) for a model; print its URL")
    serve.add_argument("model", help="local Hugging Face model directory, or smollm2-135m")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (0: a free one)")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    serve.add_argument("--lora", action="store_true", help="serve LoRA adapters loaded at run time (for rlab run)")
    serve.add_argument("--max-lora-rank", type=int, default=16, help="largest adapter rank with --lora")
    serve.add_argument("--max-model-len", type=int, default=2048, help="context length, tokens")
    serve.add_argument("--dtype", default="auto", help="weights' dtype on the server (auto: bfloat16 where it runs natively, else float32)")
    serve.add_argument("--vllm-python", help="the Python with vllm (default: $RLAB_VLLM_PYTHON, else this one)")


def cmd_serve(args: argparse.Namespace) -> int:
    from rlab.engine.policy.smollm2 import resolve_model
    from rlab.engine.policy.vllm_launch import ServeSettings, find_vllm_python, serve_until_stopped

    python = find_vllm_python(args.vllm_python)  # before converting a model it could not serve
    settings = ServeSettings(resolve_model(Path(args.model)), port=args.port or None, host=args.host,
                             lora=args.lora, max_lora_rank=args.max_lora_rank,
                             max_model_len=args.max_model_len, dtype=args.dtype)
    return serve_until_stopped(settings, python)


#: This group's handlers by command name.
COMMANDS: dict[str, Command] = {"serve": cmd_serve}
