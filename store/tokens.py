"""Per-token log-probs of a sampled completion, packed for the run file.

Two BLOB columns of ``trajectories`` (schema v6): ``token_logprobs``, one
little-endian float16 per sampled token (nats, under the sampling policy;
float16 keeps about 3 significant digits, plenty for shading), and
``token_ends``, one little-endian uint32 per token: the character offset in
``completion`` where that token's text ends, so the inspector can cut the
completion into tokens without the tokenizer. 6 bytes per token. Since
schema v13 a third, ``token_policy_logprobs``, holds the trained policy's
log-probs of the same tokens at the update (float16 too): the sampler's
mismatch, token by token.
"""

from __future__ import annotations

import numpy as np


def pack(ends: list[int], logprobs: list[float]) -> tuple[bytes, bytes]:
    """(token_ends, token_logprobs) blobs for one completion.

    Raises:
        ValueError: the lists differ in length.
    """
    if len(ends) != len(logprobs):
        raise ValueError(f"one end offset per logprob: got {len(ends)} and {len(logprobs)}")
    return np.asarray(ends, dtype="<u4").tobytes(), pack_logprobs(logprobs)


def pack_logprobs(logprobs: list[float]) -> bytes:
    """One completion's log-probs (nats) as a blob: little-endian float16, one per token."""
    return np.asarray(logprobs, dtype="<f2").tobytes()


def unpack_logprobs(blob: bytes | None) -> list[float] | None:
    """The log-probs (nats) of a :func:`pack_logprobs` blob, or None when none was stored."""
    return np.frombuffer(blob, dtype="<f2").astype(float).tolist() if blob else None


def unpack(completion: str, ends: bytes | None, logprobs: bytes | None) -> tuple[list[str], list[float]] | None:
    """The completion's token texts and their logprobs (nats), or None when none were stored."""
    if not ends or not logprobs:
        return None
    offsets = np.frombuffer(ends, dtype="<u4").tolist()
    starts = [0, *offsets[:-1]]
    return [completion[a:b] for a, b in zip(starts, offsets)], unpack_logprobs(logprobs) or []
