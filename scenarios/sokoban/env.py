"""Sokoban as text turns: gym-sokoban's own rooms and moves, one move per turn.

The environment is gym-sokoban's (Schrader, github.com/mpSchrader/gym-sokoban,
the PyPI package ``gym-sokoban`` 0.0.6): rooms come from its room generator
(``room_utils.generate_room``: a random-walk topology, then boxes placed by
playing the game in reverse), moves, rewards and endings from its
``SokobanEnv.step()`` (-0.1 a step, +1 for a box pushed on a target, -1 for
one pushed off, +10 when every box is on a target; the episode ends then or
after ``max_steps``). RAGEN (Wang et al. 2025, arXiv 2504.20073) and
verl-agent play Sokoban the same way: gym-sokoban's ``step()``, small rooms
(6 x 6, one box). Ours are only the text rendering and the action parsing.

How the library is loaded: ``import gym_sokoban`` runs the package's
``__init__``, which imports ``pkg_resources`` (gone from setuptools 81 on;
this project's environments have setuptools 84) to register gym ids, and
``sokoban_env`` imports ``render_utils``, which needs ``pkg_resources`` and
imageio to draw RGB frames. Neither is needed to play: :func:`library`
loads the package's own ``envs/room_utils.py`` and ``envs/sokoban_env.py``
from the installed distribution, unchanged, under a private package name,
with the image renderer replaced by a module whose functions raise (text is
rendered here, so they are never called). gym-sokoban's ``SokobanEnv``
subclasses the old ``gym.Env`` (gym 0.26, gym-sokoban's own dependency),
which prints an "unmaintained" notice on import; it is swallowed.

The room generator draws from the global ``random`` and ``numpy.random``
streams; :func:`level` seeds both with the level's seed and puts them back
afterwards, so a level is a pure function of its seed and nothing else in
the process sees its draws. A failed generation (a room with no pushable
layout) is retried on the same stream, as ``SokobanEnv.reset`` does.

Rendering (RAGEN's symbols, one ASCII character per cell; the room's
border, always wall in gym-sokoban's rooms, is not drawn):

    # wall   _ floor   O target   X box   * box on target   P player   S player on target

    reset / after a move       the room, one line per row, e.g. ``#__O\\n#X__\\n#P__\\n####\\n``
    an unparsable reply        ``bad\\n`` and the room (gym-sokoban's own "no operation", a step)
    all boxes on targets       ``solved``
    out of steps               ``lost``

Moves are ``u``, ``d``, ``l``, ``r`` (or the words), gym-sokoban's actions
1-4 ("push up" ... "push right": push a box if there is one, else move, as
RAGEN maps them). The state key is the rendered room (GiGPO's anchor state
is the environment's own observation, identical grids).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import io
import random
import re
import sys
import types
from typing import Any

import numpy as np

#: Our letters and words to gym-sokoban's actions (1 push up, 2 push down, 3 push left, 4 push right).
ACTIONS = {"u": 1, "d": 2, "l": 3, "r": 4, "up": 1, "down": 2, "left": 3, "right": 4}
#: gym-sokoban's "no operation": what an unparsable reply does.
NO_OPERATION = 0
#: gym-sokoban's cell codes (room_state; 6 = the player on a target, ours) to our symbols.
SYMBOLS = {0: "#", 1: "_", 2: "O", 3: "*", 4: "X", 5: "P", 6: "S"}
_REPLY = re.compile(r"\s*([a-z]+)\s*[.!]?\s*")
_PACKAGE = "_rlab_gym_sokoban_envs"


def _no_images(*args: Any, **kwargs: Any) -> None:
    raise NotImplementedError("Rollout Lab renders gym-sokoban rooms as text; RGB frames are not loaded")


@functools.cache
def library() -> types.SimpleNamespace:
    """gym-sokoban's ``room_utils`` and ``sokoban_env`` modules, loaded from the
    installed distribution without its package ``__init__`` and image renderer
    (see the module docstring).

    Raises:
        ModuleNotFoundError: gym-sokoban (or gym) is not installed.
    """
    spec = importlib.util.find_spec("gym_sokoban")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the sokoban scenario needs gym-sokoban: pip install gym-sokoban==0.0.6",
                                  name="gym_sokoban")
    if _PACKAGE not in sys.modules:
        package = types.ModuleType(_PACKAGE)
        package.__path__ = [f"{list(spec.submodule_search_locations)[0]}/envs"]
        renderer = types.ModuleType(f"{_PACKAGE}.render_utils")
        renderer.room_to_rgb = renderer.room_to_tiny_world_rgb = _no_images  # type: ignore[attr-defined]
        sys.modules[_PACKAGE] = package
        sys.modules[renderer.__name__] = renderer
    with contextlib.redirect_stderr(io.StringIO()):  # gym's "unmaintained" notice
        sokoban_env = importlib.import_module(f"{_PACKAGE}.sokoban_env")
    return types.SimpleNamespace(room_utils=importlib.import_module(f"{_PACKAGE}.room_utils"),
                                 sokoban_env=sokoban_env)


@functools.lru_cache(maxsize=8192)
def level(dim: int, num_boxes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Room ``seed`` from gym-sokoban's generator: (room_fixed, room_state), read-only.

    gym-sokoban's defaults for the rest (``num_steps`` = 1.7 (rows + cols),
    as ``SokobanEnv`` passes it; ``p_change_directions`` 0.35; 4 tries).

    Raises:
        RuntimeError: 20 generations in a row failed (never seen for 6 x 6 rooms).
    """
    generate = library().room_utils.generate_room
    saved_random, saved_numpy = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        for _ in range(20):
            try:
                room_fixed, room_state, _ = generate(dim=(dim, dim), num_steps=int(1.7 * 2 * dim),
                                                     num_boxes=num_boxes)
                break
            except (RuntimeError, RuntimeWarning):  # what SokobanEnv.reset retries on
                continue
        else:
            raise RuntimeError(f"gym-sokoban could not generate room {seed} ({dim}x{dim}, {num_boxes} boxes)")
    finally:
        random.setstate(saved_random)
        np.random.set_state(saved_numpy)
    room_fixed, room_state = room_fixed.astype(int), room_state.astype(int)
    room_fixed.flags.writeable = room_state.flags.writeable = False
    return room_fixed, room_state


def render(room_fixed: np.ndarray, room_state: np.ndarray) -> str:
    """The room inside its border as text, one line per row."""
    room = np.where((room_state == 5) & (room_fixed == 2), 6, room_state)
    return "".join("".join(SYMBOLS[int(c)] for c in row[1:-1]) + "\n" for row in room[1:-1])


def parse_action(text: str) -> int | None:
    """gym-sokoban's action for a reply (``u``/``d``/``l``/``r`` or the word, any case,
    an optional full stop), or None for anything else."""
    match = _REPLY.fullmatch(text.lower())
    return ACTIONS.get(match.group(1)) if match else None


@functools.cache
def _text_sokoban() -> type:
    """gym-sokoban's ``SokobanEnv`` with ``render`` drawing nothing: its ``step()``
    renders an RGB frame for the gym observation, which text play does not use."""

    class TextSokoban(library().sokoban_env.SokobanEnv):  # type: ignore[misc, name-defined]
        def render(self, *args: Any, **kwargs: Any) -> None:
            return None

    return TextSokoban


def new_library_env(dim: int, num_boxes: int, max_steps: int, seed: int) -> Any:
    """gym-sokoban's own ``SokobanEnv`` set to room ``seed`` as its ``reset()`` would
    set it (counters at 0), drawing no frames (``render`` returns None)."""
    env = _text_sokoban()(dim_room=(dim, dim), max_steps=max_steps, num_boxes=num_boxes, reset=False)
    room_fixed, room_state = level(dim, num_boxes, seed)
    env.room_fixed, env.room_state = room_fixed.copy(), room_state.copy()
    env.player_position = np.argwhere(env.room_state == 5)[0]
    env.num_env_steps, env.reward_last, env.boxes_on_target = 0, 0, 0
    return env


class SokobanEnv:
    """One episode of gym-sokoban on room ``example["level_seed"]``.

    Args:
        dim: the room's side (6 in RAGEN's and verl-agent's settings).
        num_boxes: boxes (and targets) in the room.
        max_turns: replies at most; gym-sokoban's ``max_steps`` too, so the
            library ends the episode itself.
    """

    def __init__(self, dim: int, num_boxes: int, max_turns: int):
        if max_turns < 1:
            raise ValueError(f"SokobanEnv needs max_turns >= 1, got {max_turns}")
        self.dim, self.num_boxes, self.max_turns = dim, num_boxes, max_turns
        self.invalid = False

    def reset(self, example: dict[str, Any]) -> tuple[list[dict], str]:
        """Set gym-sokoban's environment to the level's room; the state key is the rendered room.

        Raises:
            ValueError: the example has no integer ``level_seed``.
        """
        seed = example.get("level_seed")
        if not isinstance(seed, int):
            raise ValueError(f"example {example.get('id')!r}: 'level_seed' must be an integer, got {seed!r}")
        self.gym = new_library_env(self.dim, self.num_boxes, self.max_turns, seed)
        self.invalid = False
        grid = render(self.gym.room_fixed, self.gym.room_state)
        return [_user(grid)], grid

    def step(self, action: str) -> tuple[list[dict], float, bool, str]:
        """Apply one reply with gym-sokoban's ``step()``; see the module docstring for the answers."""
        move = parse_action(action)
        self.invalid = move is None
        _, reward, done, _ = self.gym.step(NO_OPERATION if move is None else move)
        grid = render(self.gym.room_fixed, self.gym.room_state)
        if done:
            return [_user("solved" if self.gym._check_if_all_boxes_on_target() else "lost")], float(reward), True, grid
        return [_user(("bad\n" if self.invalid else "") + grid)], float(reward), False, grid

    def legal_moves(self) -> list[str]:
        """Moves that change the room (a step onto floor or a target, or a box
        pushed onto one), in ``u d l r`` order: the warm start's random play."""
        state, (row, col) = self.gym.room_state, self.gym.player_position
        moves = []
        for move, (dr, dc) in (("u", (-1, 0)), ("d", (1, 0)), ("l", (0, -1)), ("r", (0, 1))):
            ahead, beyond = (row + dr, col + dc), (row + 2 * dr, col + 2 * dc)
            if state[ahead] in (1, 2) or (state[ahead] in (3, 4) and _inside(beyond, state.shape)
                                          and state[beyond] in (1, 2)):
                moves.append(move)
        return moves


def _inside(cell: tuple[int, int], shape: tuple[int, ...]) -> bool:
    return 0 <= cell[0] < shape[0] and 0 <= cell[1] < shape[1]


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
