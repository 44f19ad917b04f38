"""GiGPO: episode- and step-level relative advantages for groups of multi-step episodes.

GiGPO (Feng et al. 2025, arXiv 2505.10978, section 4), for N episodes of
T_i turns from one initial state: the episode-level advantage A^E compares
each episode's return with its group's; the step-level advantage A^S
compares each turn's discounted return with the other turns that left the
same environment state (its anchor group); A = A^E + omega * A^S, one
scalar per turn. :func:`gigpo` takes one group and :func:`gigpo_batch` many
groups at once over flat arrays; both run the same vectorised core. The
result also carries A^E spread over every turn (GiGPO with omega = 0), so
the step-level term can be told apart on the same episodes.
:func:`batch_advantages` takes one step's episodes (``engine.types.Trajectory``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import Any

import numpy as np

from rlab.engine.types import Trajectory
from rlab.store.stepstats import safe_divide

MODES = ("mean_norm", "mean_std_norm")
#: Per episode, its per-turn rewards: lists of floats or (T_i,) float arrays.
TurnRewards = Sequence[Sequence[float]] | Sequence[np.ndarray]


@dataclass(frozen=True)
class GiGPOResult:
    """GiGPO advantages for E episodes holding M turns in all (float64 unless said).

    Flat per-turn arrays have shape (M,), turns ordered episode by episode;
    the turns of episode i are ``offsets[i]:offsets[i + 1]``. The same values
    as per-episode lists of arrays (``result.returns[i][t]``) are the
    properties without ``_flat``.

    Fields:
        offsets: int64 (E + 1,), turn offsets of the episodes.
        group: int64 (E,), group index of each episode (0..G-1, in the
            order the groups come).
        episode_return: (E,), R_i (sum of step rewards, or the given
            episode rewards).
        episode: (E,), A^E_i.
        returns_flat: (M,), discounted return R_t = r_t + gamma R_{t+1}.
        step_flat: (M,), step-level advantage A^S.
        combined_flat: (M,), A^E + omega A^S: the advantage GiGPO trains with.
        episode_turns_flat: (M,), A^E repeated over the episode's turns
            (GiGPO with omega = 0: its episode-level part alone).
        anchor_flat: int64 (M,), anchor-group id: 0..K_g-1 within each group,
            numbered in order of first appearance (episode 0's turns first),
            equal exactly for equal state keys of the same group.
        anchor_size_flat: int64 (M,), number of turns in that anchor group.
    """

    offsets: np.ndarray
    group: np.ndarray
    episode_return: np.ndarray
    episode: np.ndarray
    returns_flat: np.ndarray
    step_flat: np.ndarray
    combined_flat: np.ndarray
    episode_turns_flat: np.ndarray
    anchor_flat: np.ndarray
    anchor_size_flat: np.ndarray

    def _per_episode(self, flat: np.ndarray) -> list[np.ndarray]:
        return np.split(flat, self.offsets[1:-1])

    @cached_property
    def returns(self) -> list[np.ndarray]:
        """Per episode, the (T_i,) discounted returns."""
        return self._per_episode(self.returns_flat)

    @cached_property
    def step(self) -> list[np.ndarray]:
        """Per episode, the (T_i,) step-level advantages A^S."""
        return self._per_episode(self.step_flat)

    @cached_property
    def combined(self) -> list[np.ndarray]:
        """Per episode, the (T_i,) advantages A^E + omega A^S."""
        return self._per_episode(self.combined_flat)

    @cached_property
    def episode_turns(self) -> list[np.ndarray]:
        """Per episode, the (T_i,) A^E on every turn (GiGPO with omega = 0)."""
        return self._per_episode(self.episode_turns_flat)

    @cached_property
    def anchor(self) -> list[np.ndarray]:
        """Per episode, the (T_i,) int64 anchor-group ids."""
        return self._per_episode(self.anchor_flat)

    @cached_property
    def anchor_size(self) -> list[np.ndarray]:
        """Per episode, the (T_i,) int64 anchor-group sizes."""
        return self._per_episode(self.anchor_size_flat)


def gigpo(
    step_rewards: TurnRewards,
    state_keys: Sequence[Sequence[Hashable]],
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    mode: str = "mean_norm",
    eps: float = 1e-6,
    episode_rewards: Sequence[float] | None = None,
) -> GiGPOResult:
    """GiGPO advantages for one group of N episodes from the same initial state.

    Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent
    Training", arXiv 2505.10978, section 4 (method):

    - episode return R_i = sum_t r_t^(i) (the plain sum, undiscounted),
      unless ``episode_rewards`` gives R_i directly (e.g. a rubric score);
    - A^E_i = (R_i - mean_j R_j) / F, each episode counted once;
    - R_t^(i) = r_t^(i) + gamma R_{t+1}^(i), R past the last turn = 0;
    - anchor group of (i, t) = every turn (j, k) of the group whose state key
      equals state_keys[i][t], revisits within one episode included;
    - A^S = (R_t^(i) - mean over the anchor group) / F;
    - A = A^E + omega A^S, one scalar per turn.

    F = 1 for ``mode="mean_norm"``; F = unbiased std (ddof 1) + eps for
    ``mode="mean_std_norm"``; the same F rule serves A^E and A^S. An anchor
    group of size 1 gives A^S = 0; a group of one episode gives A^E = 0;
    all-equal values give exactly 0.

    Args:
        step_rewards: N lists; ``step_rewards[i][t]`` is the reward of turn t
            of episode i (T_i >= 1 turns; lengths may differ).
        state_keys: N lists of the same lengths; ``state_keys[i][t]`` is the
            hashable state in which turn t acted.
        gamma: discount in [0, 1] for the step returns (paper: 0.95).
        omega: weight of A^S (paper: 1).
        mode: ``"mean_norm"`` or ``"mean_std_norm"``.
        eps: added to the std in ``mean_std_norm``.
        episode_rewards: optional N floats replacing the summed returns in A^E.

    Returns:
        :class:`GiGPOResult` (one group: every group id is 0).

    Raises:
        ValueError: mismatched lengths (naming the episode), an empty
            episode, non-finite rewards, or a bad gamma / mode / eps.
    """
    if len(step_rewards) != len(state_keys):
        raise ValueError(
            f"step_rewards has {len(step_rewards)} episodes but state_keys has "
            f"{len(state_keys)}; give one list of keys per episode"
        )
    lengths = np.fromiter(map(len, step_rewards), dtype=np.int64, count=len(step_rewards))
    for i, keys in enumerate(state_keys):
        if len(keys) != lengths[i]:
            raise ValueError(
                f"episode {i}: {lengths[i]} step rewards but {len(keys)} state keys; "
                "give one state key per turn"
            )
    rewards = np.fromiter(chain.from_iterable(step_rewards), dtype=np.float64, count=int(lengths.sum()))
    return gigpo_batch(
        rewards,
        lengths,
        np.zeros(len(lengths), dtype=np.int64),
        list(chain.from_iterable(state_keys)),
        gamma=gamma,
        omega=omega,
        mode=mode,
        eps=eps,
        episode_rewards=episode_rewards,
    )


def gigpo_batch(
    step_rewards,
    episode_lengths,
    episode_group,
    state_keys: Sequence[Hashable],
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    mode: str = "mean_norm",
    eps: float = 1e-6,
    episode_rewards=None,
) -> GiGPOResult:
    """GiGPO advantages for many groups at once, over flat arrays.

    Same formulas and conventions as :func:`gigpo`, applied within each
    group; anchor groups never span groups.

    Args:
        step_rewards: float (M,), the turns' rewards, episode after episode.
        episode_lengths: int (E,), T_i >= 0, summing to M (an episode of no
            turns, a user agent's rollout that failed before sampling, takes part
            in its group's episode advantage only).
        episode_group: (E,) group labels (ints or strings); the episodes of
            one group must be contiguous.
        state_keys: M hashable keys, one per turn (a list is fastest).
        gamma, omega, mode, eps: as in :func:`gigpo`.
        episode_rewards: optional float (E,) replacing the summed returns.

    Returns:
        :class:`GiGPOResult`.

    Raises:
        ValueError: shapes that do not match, a negative length, a group whose
            episodes are not contiguous, non-finite rewards, or a bad
            gamma / mode / eps.
    """
    _check_options(gamma, mode, eps)
    rewards = np.asarray(step_rewards, dtype=np.float64)
    lengths = np.asarray(episode_lengths, dtype=np.int64)
    _check_shapes(rewards, lengths, len(episode_group), len(state_keys))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    episode_of_turn = np.repeat(np.arange(len(lengths)), lengths)
    group = _contiguous_group_ids(np.asarray(episode_group))

    if episode_rewards is None:
        episode_return = np.bincount(episode_of_turn, weights=rewards, minlength=len(lengths))
    else:
        episode_return = np.asarray(episode_rewards, dtype=np.float64)
        if episode_return.shape != lengths.shape or not np.all(np.isfinite(episode_return)):
            raise ValueError(
                f"episode_rewards must be {len(lengths)} finite floats (one per episode), "
                f"got shape {episode_return.shape}"
            )
    adv_episode, _ = _normalise(episode_return, group, mode, eps)

    returns = _discounted_returns(rewards, offsets, episode_of_turn, gamma)
    group_bounds = offsets[np.searchsorted(group, np.arange(group[-1] + 2))]
    anchor_global, anchor_local = _anchor_ids(state_keys, group_bounds)
    adv_step, anchor_counts = _normalise(returns, anchor_global, mode, eps)

    episode_per_turn = adv_episode[episode_of_turn]
    return GiGPOResult(
        offsets=offsets,
        group=group,
        episode_return=episode_return,
        episode=adv_episode,
        returns_flat=returns,
        step_flat=adv_step,
        combined_flat=episode_per_turn + omega * adv_step,
        episode_turns_flat=episode_per_turn,
        anchor_flat=anchor_local,
        anchor_size_flat=anchor_counts[anchor_global],
    )


def _check_options(gamma: float, mode: str, eps: float) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")


def _check_shapes(rewards: np.ndarray, lengths: np.ndarray, n_labels: int, n_keys: int) -> None:
    if lengths.ndim != 1 or len(lengths) == 0:
        raise ValueError("episode_lengths must be a non-empty 1-D array (one length per episode)")
    if np.any(lengths < 0):
        raise ValueError("episode_lengths must be >= 0 (turns per episode)")
    total = int(lengths.sum())
    if rewards.shape != (total,):
        raise ValueError(f"step_rewards has shape {rewards.shape}, expected ({total},) = sum of episode_lengths")
    if n_keys != total:
        raise ValueError(f"got {n_keys} state keys for {total} turns; give one key per turn")
    if n_labels != len(lengths):
        raise ValueError(f"episode_group has {n_labels} labels for {len(lengths)} episodes")
    if not np.all(np.isfinite(rewards)):
        raise ValueError("step rewards contain NaN or inf; fix the environment or reward function")


def _contiguous_group_ids(labels: np.ndarray) -> np.ndarray:
    """Dense group ids 0..G-1 (E,) for contiguous runs of equal labels."""
    dense = np.zeros(len(labels), dtype=np.int64)
    np.cumsum(labels[1:] != labels[:-1], out=dense[1:])
    if len(np.unique(labels)) != dense[-1] + 1:
        raise ValueError(
            "episode_group: the episodes of a group must be contiguous; "
            "order the episodes group by group"
        )
    return dense


def _anchor_ids(state_keys: Sequence[Hashable], group_bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dense anchor id over the batch, anchor id local to its group), int64 (M,).

    One small dict per group: exact (raw hashes are not: hash(-1) == hash(-2)
    in CPython) and cache-friendly; dict.fromkeys keeps insertion order, so
    local ids run 0..K_g-1 in order of first appearance within the group.
    """
    keys = state_keys if isinstance(state_keys, list) else list(state_keys)
    local: list[int] = []
    sizes = np.empty(len(group_bounds) - 1, dtype=np.int64)
    for g, (start, stop) in enumerate(zip(group_bounds[:-1].tolist(), group_bounds[1:].tolist())):
        chunk = keys[start:stop]
        index: dict[Hashable, int] = {key: i for i, key in enumerate(dict.fromkeys(chunk))}
        local.extend(map(index.__getitem__, chunk))
        sizes[g] = len(index)
    anchor_local = np.array(local, dtype=np.int64)
    group_offset = np.cumsum(sizes) - sizes
    return anchor_local + np.repeat(group_offset, np.diff(group_bounds)), anchor_local


def _discounted_returns(
    rewards: np.ndarray, offsets: np.ndarray, episode_of_turn: np.ndarray, gamma: float
) -> np.ndarray:
    """R_t = r_t + gamma R_{t+1} within each episode, vectorised over episodes.

    Turns are processed by distance from their episode's end, so each pass
    updates every episode at once and reads the already-final R_{t+1}
    (flat index + 1); the loop runs max T_i times.
    """
    if not len(rewards):
        return rewards.copy()
    from_end = offsets[episode_of_turn + 1] - 1 - np.arange(len(rewards))
    # small ints make numpy's stable sort a radix sort
    narrow = np.int16 if from_end.max() < np.iinfo(np.int16).max else np.int64
    order = np.argsort(from_end.astype(narrow), kind="stable")
    counts = np.bincount(from_end)
    returns = rewards.copy()
    start = counts[0]
    for count in counts[1:]:
        idx = order[start : start + count]
        returns[idx] += gamma * returns[idx + 1]
        start += count
    return returns


def _normalise(values: np.ndarray, labels: np.ndarray, mode: str, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """((v - mean of its label) / F, (K,) count of each label), F per ``mode``.

    ``labels`` are dense ids 0..K-1. Values are shifted by one member of
    their label before averaging, so a label whose values are all equal gets
    exactly 0 (no rounding residue).
    """
    n_labels = int(labels.max()) + 1 if len(labels) else 0
    counts = np.bincount(labels, minlength=n_labels)
    member = np.empty(n_labels, dtype=np.int64)
    member[labels] = np.arange(len(labels))  # duplicates: any one write wins, all are members
    shifted = values - values[member][labels]
    centred = shifted - (np.bincount(labels, weights=shifted, minlength=n_labels) / counts)[labels]
    if mode == "mean_std_norm":
        sq = np.bincount(labels, weights=centred * centred, minlength=n_labels)
        std = np.sqrt(sq / np.maximum(counts - 1, 1))  # size 1: centred is 0 anyway
        centred = safe_divide(centred, std[labels] + eps)
    return centred, counts


def gigpo_group(episodes: Sequence[Trajectory], turn_rewards: TurnRewards | None = None,
                **options: Any) -> GiGPOResult:
    """GiGPO advantages of one group of episodes (``options`` go to :func:`gigpo`).

    ``turn_rewards``: per episode, its per-turn rewards (the rubric's, see
    ``engine.rewards.turns``); None takes the environment's own.

    Raises:
        ValueError: an episode with no turns, or bad ``options`` (see gigpo).
    """
    rewards: TurnRewards = [ep.step_rewards for ep in episodes] if turn_rewards is None else turn_rewards
    return gigpo(rewards, [ep.state_keys for ep in episodes], **options)


def batch_advantages(groups: Sequence[Sequence[Trajectory]], turn_rewards: TurnRewards | None = None,
                     **options: Any) -> GiGPOResult:
    """GiGPO advantages of many groups in one vectorised call (:func:`gigpo_batch`).

    Episodes are taken group by group, in order; ``result.group`` tells them
    apart and ``result.combined[k]`` belongs to the k-th episode overall.
    ``turn_rewards``: per episode (same order), its per-turn rewards; None
    takes the environment's own.

    Raises:
        ValueError: an episode with no turns, or bad ``options`` (see gigpo).
    """
    episodes = [ep for group in groups for ep in group]
    rewards: TurnRewards = [ep.step_rewards for ep in episodes] if turn_rewards is None else turn_rewards
    return gigpo_batch(
        np.concatenate([np.asarray(r, dtype=np.float64) for r in rewards]) if rewards else np.zeros(0),
        [len(ep.turns) for ep in episodes],
        [g for g, group in enumerate(groups) for _ in group],
        [k for ep in episodes for k in ep.state_keys],
        **options,
    )
