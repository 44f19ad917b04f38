"""FrozenLake, 8 x 8: gymnasium's 8 x 8 random maps (``generate_random_map(size=8, p=0.8, seed)``), solid ice.

Shortest walks are 14 moves; each walk may take 24. A random walk that
stays on the map almost never reaches the goal (about 0.2 % in 30 moves),
so a warm-started tiny policy has little to learn from at first. Each
rendered map is 72 characters, so the tiny policy gets a 2,048-token context,
and a warm-start step (64 contexts of up to 24 maps) takes 15-35 s on one
core: the warm start is 60 steps, enough for the reply format (one move a
turn), not the 4 x 4 lake's 150. A step plays 16 groups of 8 episodes, not
32, and a held-out eval walks the first 50 held-out maps, not 100: 256
sampled and 100 greedy walks of up to 24 turns took 41 s and 12 s on 2
cores, past issue 33's 60 s from launch to the first step. On a GPU, pass
``--prompts-per-step 32 --eval-size 100``.
"""

from __future__ import annotations

from rlab.scenarios.frozenlake import FrozenLake, system_prompt

SCENARIO = FrozenLake(name="frozenlake_8x8", size=8, system_prompt=system_prompt(8, False), max_turns=24,
                      tiny_context_tokens=2048, warm_start_steps=60,
                      run_defaults={"max_new_tokens": 2, "prompts_per_step": 16, "eval_size": 50})
