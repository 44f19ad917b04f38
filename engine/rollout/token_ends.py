"""Where each sampled token's text ends in a completion: what per-token views place tokens by."""

from __future__ import annotations

import numpy as np
from transformers import PreTrainedTokenizerBase

from rlab.engine.types import Sample


def token_ends(tokenizer: PreTrainedTokenizerBase | None, sample: Sample) -> list[int] | None:
    """Per sampled token, the character offset in ``sample.text`` where its text ends; None
    without a tokenizer, or when the tokens' texts do not add up to the text (a character
    split across byte tokens), so per-token views never misplace a token."""
    if tokenizer is None:
        return None
    pieces = tokenizer.batch_decode([[t] for t in sample.token_ids], skip_special_tokens=True)
    if "".join(pieces) != sample.text or len(sample.logprobs) != len(pieces):
        return None
    return np.cumsum([len(p) for p in pieces]).tolist()
