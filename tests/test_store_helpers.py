"""Builders of realistic store records shared by the store tests and bench."""

from rlab.store.records import GroupRecord, TrajectoryRecord, TurnRecord

PROMPT = "What is 37 + 45? Answer with the number only."


def make_group(index: int, *, size: int = 8, turns: int = 0, completion_chars: int = 300,
               reward_of=lambda j: float(j % 2), completion_of=None) -> GroupRecord:
    """A group of ``size`` scored trajectories with ~``completion_chars``
    characters of completion each (one phrase repeated, or
    ``completion_of(j)``), optionally ``turns`` turns per trajectory."""
    trajectories = []
    for j in range(size):
        completion = (completion_of(j) if completion_of is not None
                      else (f"82 because 37 + 45 = 82 (try {j}) " * 20)[:completion_chars])
        reward = reward_of(j)
        trajectories.append(TrajectoryRecord(
            index=j,
            messages=[{"role": "system", "content": "You add numbers."},
                      {"role": "user", "content": PROMPT},
                      {"role": "assistant", "content": completion}],
            completion=completion, reward=reward, components={"correct": reward},
            details={"parse_status": "ok" if reward >= 1.0 else "wrong", "parsed": 82},
            advantage=reward - 0.5, prompt_tokens=17, completion_tokens=len(completion) // 4,
            reward_version=1,
            turns=[TurnRecord(t=t, state_key=("room", t), reward=0.1 * t, ret=0.5, adv_episode=0.2,
                              adv_step=-0.1, advantage=0.1, anchor_id=t, anchor_size=size)
                   for t in range(turns)],
        ))
    return GroupRecord(index=index, example_id=f"ex-{index}", prompt=PROMPT,
                       trajectories=trajectories)
