"""GymnasiumEnvAdapter: any maze-lab env (structured or flat, wrapped or not) as a plain ``gymnasium.Env``.

Two presentations:

- ``flat=False`` (default): the union of all policy keys' Dict spaces (Maze's view, for libraries that take
  Dict spaces); an ``actor`` entry tells which policy key acts where there are several, and with several actors
  (policy keys or agents) ``info["actor"]`` names the one that acts on the returned observation as a
  ``(policy key, agent id)`` pair (one policy key shared by several agents has no ``actor`` entry: only the
  info tells the agents apart).
- ``flat=True``: what Stable-Baselines3 and most Gymnasium-based libraries take without glue. Observations are
  one 1-D float32 Box (``observation_layout`` maps it back to the dict), actions are ``Discrete`` /
  ``MultiDiscrete`` (discrete heads) or one Box (continuous heads), and a structured env whose policy keys act
  once each in a fixed order is one flat step: the action carries every sub-step's heads, the observation is
  the first sub-step's, the reward is the sum of the sub-steps' rewards. Observations of later sub-steps
  depend on earlier sub-steps' actions of the same flat step, so they are not seen by the flat agent.
  ``action_masks()`` returns the mask of the discrete action for sb3-contrib's MaskablePPO; mask observations
  (``<head>_mask`` by default) also stay in the flat observation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from maze_lab.core.env.space_checks import SpaceMismatchError
from maze_lab.core.env.structured_env import StepKey
from maze_lab.core.wrappers.flat_spaces import FlatActionLayout, FlatObservationLayout

_OBS_NAME = "observation"
_ACT_NAME = "action"


def _zero(space: gym.spaces.Space) -> Any:
    """A fixed in-space value used for the entries the current actor does not observe."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(np.zeros(space.shape, dtype=space.dtype), space.low, space.high).astype(space.dtype)
    if isinstance(space, gym.spaces.Discrete):
        return np.int64(space.start)
    if isinstance(space, gym.spaces.MultiBinary | gym.spaces.MultiDiscrete):
        return (np.zeros(space.shape, dtype=space.dtype) + getattr(space, "start", 0)).astype(space.dtype)
    return space.sample()


def _as_dict_space(space: gym.spaces.Space, name: str) -> gym.spaces.Dict:
    """Dict spaces as they are; any other space as the single entry ``name`` (e.g. after a NoDict wrapper)."""
    return space if isinstance(space, gym.spaces.Dict) else gym.spaces.Dict({name: space})


class GymnasiumEnvAdapter(gym.Env):
    """A maze-lab env as a ``gymnasium.Env`` so that other frameworks (e.g. Stable-Baselines3) can train on it.

    :param env: a MazeEnv, a structured env or a wrapper stack; Dict spaces or plain ones (NoDict wrappers).
    :param render_mode: ``"rgb_array"`` to render through the env's renderer.
    :param flat: present flat spaces (see the module docstring): a 1-D Box observation, a Discrete /
        MultiDiscrete / Box action, and a structured env's sub-steps as one step.
    :param flatten_observation: flatten observations into one Box; defaults to ``flat``. ``flat=True,
        flatten_observation=False`` keeps Dict observations (e.g. images for SB3's ``MultiInputPolicy``).
    :param action_mask_keys: action head -> observation key holding its mask (1 = allowed), for
        ``action_masks()``; by default a head ``h`` uses the observation ``h_mask`` where there is one. Needs
        ``flat=True`` and discrete heads; a mask must be observed in the first sub-step.
    :param substep_order: the order in which the policy keys act within one flat step; defaults to the order
        of the env's ``action_spaces_dict``. Only with ``flat=True``.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, env: Any, render_mode: str | None = None, flat: bool = False, *,
                 flatten_observation: bool | None = None, action_mask_keys: Mapping[str, str] | None = None,
                 substep_order: Sequence[StepKey] | None = None):
        self.env = env
        self.render_mode = render_mode
        self.flat = bool(flat)
        self.flatten_observation = self.flat if flatten_observation is None else bool(flatten_observation)
        obs_spaces = dict(env.observation_spaces_dict)
        act_spaces = dict(env.action_spaces_dict)
        self.step_keys: list[StepKey] = list(act_spaces)
        self._obs_dict_spaces = {k: _as_dict_space(s, _OBS_NAME) for k, s in obs_spaces.items()}
        self._act_dict_spaces = {k: _as_dict_space(s, _ACT_NAME) for k, s in act_spaces.items()}
        self._obs_is_dict = {k: isinstance(s, gym.spaces.Dict) for k, s in obs_spaces.items()}
        self._act_is_dict = {k: isinstance(s, gym.spaces.Dict) for k, s in act_spaces.items()}
        self._obs_names: dict[StepKey, dict[str, str]] = {}
        self._act_names: dict[StepKey, dict[str, str]] = {}
        self.observation_layout: FlatObservationLayout | None = None
        self.action_layout: FlatActionLayout | None = None
        self._mask_fields: list[tuple[slice, str]] = []
        self.action_mask_keys: dict[str, str] = {}
        self.substep_order: list[StepKey] | None = None
        if self.flat:
            self._init_flat(substep_order)
        else:
            if substep_order is not None or action_mask_keys is not None:
                raise ValueError("substep_order and action_mask_keys describe the flat presentation; pass "
                                 "flat=True with them, or leave them out")
            self._init_structured()
        if self.flatten_observation:
            self.observation_layout = FlatObservationLayout(
                _as_dict_space(self.observation_space, _OBS_NAME), f"{type(self).__name__} observation")
            self.observation_space = self.observation_layout.space
        if self.flat:
            self._init_masks(action_mask_keys)
        self._last_obs: dict | None = None

    # --- construction -----------------------------------------------------------------------------------
    def _init_structured(self) -> None:
        """Union of all policy keys' spaces; a single non-Dict space passes through unchanged."""
        single = len(self.step_keys) == 1
        key0 = self.step_keys[0]
        obs_spaces = _merge_shared(self._obs_dict_spaces, self._obs_names)
        act_spaces = _merge_shared(self._act_dict_spaces, self._act_names)
        if not single:
            obs_spaces["actor"] = gym.spaces.Discrete(len(self.step_keys))
        self._zeros = {k: _zero(s) for k, s in obs_spaces.items()}
        self._present_obs_dict = not (single and not self._obs_is_dict[key0])
        self._present_act_dict = not (single and not self._act_is_dict[key0])
        self.observation_space = (gym.spaces.Dict(obs_spaces) if self._present_obs_dict
                                  else self.env.observation_spaces_dict[key0])
        self.action_space = gym.spaces.Dict(act_spaces) if self._present_act_dict else self.env.action_spaces_dict[key0]

    def _init_flat(self, substep_order: Sequence[StepKey] | None) -> None:
        """One flat step per cycle of sub-steps: the union of the heads as one flat action."""
        counts = dict(self.env.agent_counts_dict)
        if any(n != 1 for n in counts.values()):
            raise ValueError(f"flat=True needs exactly one agent per policy key, but the env has agent counts "
                             f"{counts} (-1 = dynamic): one flat step cannot hold a varying number of agents' "
                             f"actions. Use GymnasiumEnvAdapter(env) (flat=False), which steps one agent at a time "
                             f"and names it in info['actor'] as (policy key, agent id) after reset() and every "
                             f"step, or train it with a maze-lab trainer, which handles several agents per key")
        order = list(self.step_keys if substep_order is None else substep_order)
        if sorted(map(str, order)) != sorted(map(str, self.step_keys)) or len(set(order)) != len(order):
            raise ValueError(f"substep_order must list every policy key once, got {order}; the env's policy keys "
                             f"are {self.step_keys}")
        self.substep_order = order
        counts_by_name: dict[str, int] = {}
        for key in order:
            for name in self._act_dict_spaces[key].spaces:
                counts_by_name[name] = counts_by_name.get(name, 0) + 1
        heads: dict[str, gym.spaces.Space] = {}
        for key in order:
            names = self._act_names[key] = {}
            for name, sub in self._act_dict_spaces[key].spaces.items():
                # every sub-step acts in the same flat step, so a name two sub-steps share needs two heads
                full = name if counts_by_name[name] == 1 else f"{key}/{name}"
                names[name] = full
                heads[full] = sub
        self.action_layout = FlatActionLayout(gym.spaces.Dict(list(heads.items())),
                                              f"{type(self).__name__} action")
        self.action_space = self.action_layout.space
        self.observation_space = self.env.observation_spaces_dict[order[0]]
        self._present_obs_dict = isinstance(self.observation_space, gym.spaces.Dict)

    def _init_masks(self, action_mask_keys: Mapping[str, str] | None) -> None:
        """Resolve which observation masks which discrete head; errors say where a mask must come from."""
        assert self.action_layout is not None
        first_space = self._obs_dict_spaces[self.substep_order[0]]
        explicit = action_mask_keys is not None
        if explicit and not self.action_layout.is_discrete:
            raise ValueError(f"action masks need discrete action heads, but the flat action is {self.action_space}")
        if explicit:
            pairs = dict(action_mask_keys)
        elif self.action_layout.is_discrete:
            short = {full: name for names in self._act_names.values() for name, full in names.items()}
            pairs = {f.name: f"{short[f.name]}_mask" for f in self.action_layout.fields
                     if f"{short[f.name]}_mask" in first_space.spaces}
        else:
            pairs = {}
        heads = [f.name for f in self.action_layout.fields]
        for head, obs_key in pairs.items():
            if head not in heads:
                raise ValueError(f"action_mask_keys: unknown action head '{head}'; the flat action's heads are {heads}")
            if obs_key not in first_space.spaces:
                later = [k for k in self.substep_order[1:] if obs_key in self._obs_dict_spaces[k].spaces]
                why = (f"it is observed only in sub-step {later[0]!r}, after the flat step's action is chosen, so it "
                       f"cannot mask a flat action (use flat=False to act on it)" if later
                       else f"the first sub-step observes {list(first_space.spaces)}")
                raise ValueError(f"action_mask_keys: observation '{obs_key}' for head '{head}' is not available: {why}")
            field = self.action_layout.field(head)
            size = field.mask_stop - field.mask_start
            mask_space = first_space.spaces[obs_key]
            if int(np.prod(mask_space.shape or (0,))) != size:
                raise ValueError(f"action_mask_keys: mask '{obs_key}' ({mask_space}) must have {size} entries, one "
                                 f"per choice of head '{head}' ({field.space})")
            self._mask_fields.append((field.mask_slice, obs_key))
        self.action_mask_keys = pairs

    # --- observations -------------------------------------------------------------------------------------
    def _checked_obs(self, key: StepKey, obs: Any) -> dict:
        """The observation of policy key ``key`` as a dict, with exactly the keys its space declares."""
        if not self._obs_is_dict[key]:
            return {_OBS_NAME: obs}
        space = self._obs_dict_spaces[key]
        if not isinstance(obs, Mapping) or obs.keys() != space.spaces.keys():
            got = sorted(map(str, obs)) if isinstance(obs, Mapping) else type(obs).__name__
            missing = [k for k in space.spaces if not isinstance(obs, Mapping) or k not in obs]
            unknown = sorted(str(k) for k in obs if k not in space.spaces) if isinstance(obs, Mapping) else []
            raise SpaceMismatchError(
                f"{type(self).__name__}: the observation of policy key {key!r} has keys {got}: missing {missing}, "
                f"unknown {unknown}; its observation space is {space}. A wrapper that adds or drops observations "
                f"must declare them in observation_spaces_dict")
        return obs

    def _to_gym_obs(self, obs: Any) -> Any:
        """The adapter's observation of the env's observation for the actor that acts next."""
        key = self.env.actor_id().step_key
        if key not in self._obs_dict_spaces:
            raise RuntimeError(f"{type(self).__name__}: the env's next actor has policy key {key!r}, which is not "
                               f"one of its observation_spaces_dict keys {list(self._obs_dict_spaces)}")
        as_dict = self._checked_obs(key, obs)
        if self.flat:
            self._last_obs = as_dict
            out: Any = as_dict if self._present_obs_dict else obs
        elif not self._present_obs_dict:
            out = obs
        else:
            # fresh copies: callers (and gymnasium's checker) may keep or modify returned arrays
            out = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in self._zeros.items()}
            names = self._obs_names[key]
            for name, value in as_dict.items():
                out[names[name]] = value
            if "actor" in out:
                out["actor"] = np.int64(self.step_keys.index(key))
        if self.observation_layout is not None:
            return self.observation_layout.flatten(_as_dict_obs(out))
        return out

    # --- env API ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        """Reset the maze-lab env."""
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed, options=options)
        if self.flat:
            self._require_actor(self.substep_order[0], "after reset()")
        return self._to_gym_obs(obs), self._with_actor(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Pass the action (the current actor's part of it, or each sub-step's part when flat) to the env."""
        if self.flat:
            return self._flat_step(action)
        key = self.env.actor_id().step_key
        if self._present_act_dict:
            if not isinstance(action, Mapping):
                raise SpaceMismatchError(f"{type(self).__name__}: expected a dict action in {self.action_space}, "
                                         f"got {type(action).__name__}; pass flat=True for a flat action space")
            names = self._act_names[key]
            missing = [full for full in names.values() if full not in action]
            if missing:
                raise SpaceMismatchError(f"{type(self).__name__}: action of policy key {key!r} misses {missing}; "
                                         f"it needs {list(names.values())} of {self.action_space}")
            sub = {name: _plain(action[full]) for name, full in names.items()}
            env_action: Any = sub if self._act_is_dict[key] else sub[_ACT_NAME]
        else:
            env_action = _plain(action)
        obs, reward, terminated, truncated, info = self.env.step(env_action)
        return self._to_gym_obs(obs), float(reward), bool(terminated), bool(truncated), self._with_actor(info)

    def _with_actor(self, info: Mapping[str, Any]) -> dict:
        """``info`` with ``actor``: the (policy key, agent id) that acts next, where more than one actor can act."""
        if self.flat or (len(self.step_keys) == 1 and all(n == 1 for n in self.env.agent_counts_dict.values())):
            return info
        actor = self.env.actor_id()
        return {**info, "actor": (actor.step_key, int(actor.agent_id))}

    def _flat_step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Every sub-step in ``substep_order``, each with its heads of the flat action; rewards are summed."""
        assert self.action_layout is not None
        heads = self.action_layout.to_dict(action)
        total, terminated, truncated, info = 0.0, False, False, {}
        obs: Any = None
        for key in self.substep_order:
            self._require_actor(key, "within a flat step")
            names = self._act_names[key]
            sub = {name: heads[full] for name, full in names.items()}
            obs, reward, terminated, truncated, sub_info = self.env.step(sub if self._act_is_dict[key]
                                                                         else sub[_ACT_NAME])
            total += float(reward)
            info.update(sub_info)
            if terminated or truncated:
                break
        first = self.substep_order[0]
        if self.env.actor_id().step_key != first:
            if not (terminated or truncated):
                self._require_actor(first, "after a full cycle of sub-steps")
            # an episode that ends mid-cycle has no observation of the first sub-step: repeat the last one
            last = self._last_obs if self._present_obs_dict else self._last_obs[_OBS_NAME]
            out = self.observation_layout.flatten(_as_dict_obs(last)) if self.observation_layout else last
            return out, total, bool(terminated), bool(truncated), info
        return self._to_gym_obs(obs), total, bool(terminated), bool(truncated), info

    def _require_actor(self, expected: StepKey, when: str) -> None:
        actor = self.env.actor_id().step_key
        if actor != expected:
            raise RuntimeError(
                f"{type(self).__name__}(flat=True) needs the policy keys to act once each in the order "
                f"{self.substep_order}, but {when} policy key {actor!r} acts where {expected!r} was expected. "
                f"Pass the env's order as substep_order=[...] if it is fixed, or use GymnasiumEnvAdapter(env) "
                f"(flat=False), which presents each sub-step with an 'actor' entry")

    def action_masks(self) -> np.ndarray:
        """Boolean mask over the flat discrete action (the ``action_masks()`` that sb3-contrib's MaskablePPO
        calls): the concatenated masks of all heads, all-True for heads without a mask observation or whose
        mask rules out every choice."""
        if self.action_layout is None or not self.action_layout.is_discrete:
            raise RuntimeError(f"action masks exist for flat discrete actions only (GymnasiumEnvAdapter(env, "
                               f"flat=True) with discrete heads); this adapter's action space is {self.action_space}")
        if self._last_obs is None:
            raise RuntimeError("action_masks() was called before reset(); call reset() first")
        mask = np.ones(self.action_layout.mask_size, dtype=bool)
        for part, obs_key in self._mask_fields:
            allowed = np.asarray(self._last_obs[obs_key]).ravel() > 0
            if allowed.any():  # an all-zero mask would leave the policy nothing to sample
                mask[part] = allowed
        return mask

    def render(self) -> np.ndarray | None:
        """RGB frame from the maze-lab env's renderer."""
        return self.env.render() if hasattr(self.env, "render") else None

    def close(self) -> None:
        """Close the maze-lab env."""
        self.env.close()


def _merge_shared(spaces: dict[StepKey, gym.spaces.Dict], names: dict[StepKey, dict[str, str]]
                  ) -> dict[str, gym.spaces.Space]:
    """Union of the policy keys' entries; a name declared with different spaces is prefixed ``<step_key>/``."""
    owners: dict[str, gym.spaces.Space] = {}
    for key, space in spaces.items():
        for name, sub in space.spaces.items():
            if name in owners and owners[name] != sub:
                names.setdefault(key, {})[name] = f"{key}/{name}"
            else:
                owners[name] = sub
                names.setdefault(key, {})[name] = name
    merged: dict[str, gym.spaces.Space] = {}
    for key, space in spaces.items():
        for name, sub in space.spaces.items():
            merged[names[key][name]] = sub
    return merged


def _as_dict_obs(obs: Any) -> Mapping:
    return obs if isinstance(obs, Mapping) else {_OBS_NAME: obs}


def _plain(value: Any) -> Any:
    """0-d arrays (as libraries return for Discrete spaces) as Python scalars."""
    return value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
