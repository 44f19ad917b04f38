"""Per-token logprobs of sampled tokens: packed as float16, stored, shown by the inspector (l)."""

from __future__ import annotations

import math

from rlab.engine.policy.tiny import build_tokenizer
from rlab.engine.rollout.token_ends import token_ends
from rlab.engine.types import Sample
from rlab.store.reader import StoreReader
from rlab.store.records import GroupRecord, TrajectoryRecord
from rlab.store.tokens import pack, unpack
from rlab.store.writer import StoreWriter
from rlab.tui.inspector import token_pieces


def test_pack_unpack_round_trips_within_float16_precision():
    ends, logprobs = pack([1, 3, 3], [-0.1234, -2.5, -7.0])
    pieces, values = unpack("abc", ends, logprobs)
    assert pieces == ["a", "bc", ""]
    assert [round(v, 2) for v in values] == [-0.12, -2.5, -7.0] and len(ends) + len(logprobs) == 18
    assert unpack("abc", None, None) is None


def test_a_sample_of_the_tiny_tokenizer_gives_one_end_per_token_eos_included():
    tok = build_tokenizer()
    ids = tok.encode("57 67", add_special_tokens=False) + [tok.eos_token_id]
    assert token_ends(tok, Sample(ids, "57 67", [-0.5] * len(ids), False)) == [1, 2, 3, 4, 5, 5]
    assert token_ends(tok, Sample(ids, "something else", [-0.5] * len(ids), False)) is None


def test_stored_logprobs_reach_the_inspector(tmp_path):
    db = tmp_path / "lp.db"
    with StoreWriter(db) as writer:
        run_id = writer.start_run("r", "arithmetic", {}, {})
        trajectory = TrajectoryRecord(index=0, messages=[], completion="57", reward=1.0, components={},
                                      details={}, advantage=0.5, logprobs=[-0.01, -3.0, -0.2],
                                      token_ends=[1, 2, 2])
        writer.write_group(run_id, 1, GroupRecord(index=0, example_id="x", prompt="p", trajectories=[trajectory]))
    reader = StoreReader(db)
    row = reader.trajectory(reader.groups_of_step(run_id, 1)[0]["trajectories"][0]["id"])
    pieces, logprobs = token_pieces(row)
    assert pieces == ["5", "7", ""] and math.isclose(logprobs[1], -3.0)
