"""Mistakes made when writing an env as the seed's Cutting-2D tutorial shows: each raises an error that names what
is wrong and what to write instead (or, where the intent is unambiguous, is accepted)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from maze_lab.core.env.core_env import CoreEnv
from maze_lab.core.env.interfaces import ActionConversionInterface, ObservationConversionInterface
from maze_lab.core.env.maze_env import EnvNotResetError, EpisodeEndedError, MazeEnv, StepResultError
from maze_lab.core.env.space_checks import SpaceMismatchError
from maze_lab.core.env.structured_env import ActorID
from maze_lab.core.utils.factory import ConfigurationError
from maze_lab.core.wrappers.wrapper import Wrapper, WrapperParameterError, wrap_env


# ---- a small cutting env in the tutorial's style: inventory, MazeState/MazeAction, conversions, core env ----------
class CuttingState:
    """Pieces in stock and the current order."""

    def __init__(self, inventory: list[tuple[int, int]], max_pieces: int, demand: tuple[int, int],
                 raw_piece_size: tuple[int, int]):
        self.inventory = list(inventory)
        self.max_pieces = max_pieces
        self.current_demand = demand
        self.raw_piece_size = raw_piece_size


class CuttingAction:
    """Which piece to cut."""

    def __init__(self, piece_id: int):
        self.piece_id = piece_id


class CuttingCoreEnv(CoreEnv):
    """Cuts the ordered piece from the chosen stock piece; a fresh raw piece costs -1; ends after ``max_steps``."""

    def __init__(self, max_pieces_in_inventory: int = 4, raw_piece_size: tuple[int, int] = (4, 3),
                 static_demand: tuple[int, int] = (1, 2), max_steps: int = 3):
        super().__init__()
        self.max_pieces_in_inventory = max_pieces_in_inventory
        self.raw_piece_size = tuple(raw_piece_size)
        self.current_demand = tuple(static_demand)
        self.max_steps = max_steps
        self.seeded_with: int | None = None
        self._setup_env()

    def _setup_env(self) -> None:
        self.inventory = [self.raw_piece_size]
        self.steps = 0

    def step(self, maze_action: CuttingAction) -> tuple[CuttingState, float, bool, bool, dict]:
        """Cut, replenish, and say whether the episode ended."""
        info, reward = {}, 0.0
        if maze_action.piece_id >= len(self.inventory):
            info["error"] = "piece_id_out_of_bounds"
        else:
            piece = self.inventory.pop(maze_action.piece_id)
            rest = (piece[0] - self.current_demand[0], piece[1])
            if rest[0] > 0:
                self.inventory.append(rest)
            if not self.inventory:
                self.inventory.append(self.raw_piece_size)
                reward = -1.0
        self.steps += 1
        return self.get_maze_state(), reward, self.steps >= self.max_steps, False, info

    def get_maze_state(self) -> CuttingState:
        """The current state."""
        return CuttingState(self.inventory, self.max_pieces_in_inventory, self.current_demand, self.raw_piece_size)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> CuttingState:
        """A fresh inventory."""
        self._setup_env()
        return self.get_maze_state()

    def seed(self, seed: int | None) -> None:
        """Remember the seed (the env has no randomness)."""
        self.seeded_with = seed


class ObservationConversion(ObservationConversionInterface):
    """Inventory (padded), inventory size and the ordered piece."""

    def __init__(self, raw_piece_size: tuple[int, int] = (4, 3), max_pieces_in_inventory: int = 4):
        self.raw_piece_size = raw_piece_size
        self.max_pieces_in_inventory = max_pieces_in_inventory

    def maze_to_space(self, maze_state: CuttingState) -> dict[str, np.ndarray]:
        """State to observation."""
        inventory = maze_state.inventory + [(0, 0)] * (self.max_pieces_in_inventory - len(maze_state.inventory))
        return {"inventory": np.asarray(inventory, dtype=np.float32),
                "inventory_size": np.asarray([len(maze_state.inventory)], dtype=np.float32),
                "ordered_piece": np.asarray(maze_state.current_demand, dtype=np.float32)}

    def space(self) -> gym.spaces.Dict:
        """Bounded by the raw piece size and the inventory size."""
        n, (w, h) = self.max_pieces_in_inventory, self.raw_piece_size
        return gym.spaces.Dict({
            "inventory": gym.spaces.Box(np.zeros((n, 2), np.float32), np.full((n, 2), [w + 1, h + 1], np.float32),
                                        dtype=np.float32),
            "inventory_size": gym.spaces.Box(np.float32(0), np.float32(n + 1), shape=(1,), dtype=np.float32),
            "ordered_piece": gym.spaces.Box(np.float32(0), np.float32(max(w, h) + 1), shape=(2,), dtype=np.float32),
        })


class ActionConversion(ActionConversionInterface):
    """``piece_idx`` to CuttingAction."""

    def __init__(self, max_pieces_in_inventory: int = 4):
        self.max_pieces_in_inventory = max_pieces_in_inventory
        self.received: list[Any] = []

    def space_to_maze(self, action: dict[str, Any], maze_state: CuttingState) -> CuttingAction:
        """Action to MazeAction."""
        self.received.append(action["piece_idx"])
        return CuttingAction(piece_id=action["piece_idx"])

    def space(self) -> gym.spaces.Dict:
        """Which piece to cut."""
        return gym.spaces.Dict({"piece_idx": gym.spaces.Discrete(self.max_pieces_in_inventory)})


def make_env(core_env: CoreEnv | None = None, observation_conversion: ObservationConversionInterface | None = None,
             action_conversion: ActionConversionInterface | None = None) -> MazeEnv:
    """The tutorial's factory: core env plus one conversion pair under policy key 0."""
    return MazeEnv(core_env or CuttingCoreEnv(), {0: action_conversion or ActionConversion()},
                   {0: observation_conversion or ObservationConversion()})


# ---- 1. a 4-tuple from CoreEnv.step ------------------------------------------------------------------------------
class OldGymStepCoreEnv(CuttingCoreEnv):
    """Returns (maze_state, reward, done, info) as the seed's tutorial (old Gym API) does."""

    def step(self, maze_action: CuttingAction) -> Any:
        """The old 4-tuple."""
        maze_state, reward, done, _, info = super().step(maze_action)
        return maze_state, reward, done, info


def test_four_tuple_step_says_to_return_the_gymnasium_five_tuple() -> None:
    env = make_env(OldGymStepCoreEnv())
    env.reset()
    with pytest.raises(StepResultError, match=r"OldGymStepCoreEnv.step\(\) returned 4 values \(maze_state, reward, "
                                              r"done, info\): the old Gym API.*Gymnasium's 5-tuple: return maze_state, "
                                              r"reward, terminated, truncated, info.*`return maze_state, reward, "
                                              r"done, False, info`"):
        env.step({"piece_idx": 0})


class NoneStepCoreEnv(CuttingCoreEnv):
    """Forgets to return anything."""

    def step(self, maze_action: CuttingAction) -> Any:
        """Nothing."""
        super().step(maze_action)


def test_step_returning_nothing_names_the_five_tuple() -> None:
    env = make_env(NoneStepCoreEnv())
    env.reset()
    with pytest.raises(StepResultError, match=r"NoneStepCoreEnv.step\(\) must return the 5-tuple \(maze_state, "
                                              r"reward, terminated, truncated, info\), got a NoneType"):
        env.step({"piece_idx": 0})


# ---- 2. an observation outside its Box bounds during step -------------------------------------------------------
def test_observation_outside_its_bounds_during_step_raises() -> None:
    # an order larger than the raw piece: the ordered_piece observation exceeds its space's high of 5 once it is seen
    core = CuttingCoreEnv()
    env = make_env(core)
    env.reset()
    core.current_demand = (1, 9)
    with pytest.raises(SpaceMismatchError, match=r"policy key 0 \(ObservationConversion.maze_to_space\): "
                                                 r"observation\['ordered_piece'\] is outside the bounds of its space "
                                                 r"Box\(0.0, 5.0, \(2,\), float32\): \[1\] = 9.0 not in \[0.0, 5.0\]\. "
                                                 r"Fix the observation conversion, or widen the space's low/high"):
        env.step({"piece_idx": 0})


class NanObservation(ObservationConversion):
    """Produces NaN in the inventory (e.g. a division by zero in a feature)."""

    def maze_to_space(self, maze_state: CuttingState) -> dict[str, np.ndarray]:
        """NaN in one entry after the first step."""
        obs = super().maze_to_space(maze_state)
        if len(maze_state.inventory) > 1 or maze_state.inventory[0] != maze_state.raw_piece_size:
            obs["inventory"][2, 1] = np.nan
        return obs


def test_nan_and_large_observations_are_outside_the_bounds() -> None:
    env = make_env(observation_conversion=NanObservation())
    env.reset()
    with pytest.raises(SpaceMismatchError, match=r"observation\['inventory'\] is outside.*\[2, 1\] = nan"):
        env.step({"piece_idx": 0})
    # on reset as well (it used to be only a warning there)
    core = CuttingCoreEnv(raw_piece_size=(4, 3))
    core.raw_piece_size = (9, 3)
    env = make_env(core)
    with pytest.raises(SpaceMismatchError, match=r"reset\(\), policy key 0.*observation\['inventory'\].*\[0, 0\] = "
                                                 r"9.0 not in \[0.0, 5.0\]"):
        env.reset()


class HistoryObservation(ObservationConversion):
    """Adds a ``history`` vector of ``size`` entries in [0, 1] whose entry 3 becomes 2 after the first step."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def maze_to_space(self, maze_state: CuttingState) -> dict[str, np.ndarray]:
        """With the history."""
        history = np.zeros(self.size, dtype=np.float32)
        history[3] = 0.0 if maze_state.inventory == [maze_state.raw_piece_size] else 2.0
        return {**super().maze_to_space(maze_state), "history": history}

    def space(self) -> gym.spaces.Dict:
        """With the history in [0, 1]."""
        return gym.spaces.Dict({**super().space().spaces, "history": gym.spaces.Box(0, 1, (self.size,), np.float32)})


@pytest.mark.parametrize("size", [4, 40])  # checked in Python for small spaces, with numpy for large ones
def test_bounds_of_small_and_large_boxes(size: int) -> None:
    env = make_env(observation_conversion=HistoryObservation(size))
    env.reset()
    with pytest.raises(SpaceMismatchError, match=rf"observation\['history'\] is outside the bounds of its space "
                                                 rf"Box\(0.0, 1.0, \({size},\), float32\): \[3\] = 2.0 not in "
                                                 rf"\[0.0, 1.0\]"):
        env.step({"piece_idx": 0})


def test_observation_bounds_are_not_checked_without_space_checks() -> None:
    core = CuttingCoreEnv()
    env = MazeEnv(core, {0: ActionConversion()}, {0: ObservationConversion()}, check_spaces=False)
    env.reset()
    core.current_demand = (1, 9)
    obs, *_ = env.step({"piece_idx": 0})
    assert obs["ordered_piece"][1] == 9.0


# ---- 3. stepping after the episode ended -------------------------------------------------------------------------
def test_step_after_the_episode_ended_says_to_reset() -> None:
    env = make_env(CuttingCoreEnv(max_steps=2))
    with pytest.raises(EnvNotResetError, match=r"step\(\) was called before reset\(\)"):
        env.step({"piece_idx": 0})
    env.reset()
    env.step({"piece_idx": 0})
    _, _, terminated, _, _ = env.step({"piece_idx": 0})
    assert terminated
    with pytest.raises(EpisodeEndedError, match=r"MazeEnv.step\(\) was called after the episode ended \(the last "
                                                r"step returned terminated or truncated\); call env.reset\(\)"):
        env.step({"piece_idx": 0})
    env.reset()
    env.step({"piece_idx": 0})  # a new episode steps again


class TruncatingCoreEnv(CuttingCoreEnv):
    """Truncates instead of terminating."""

    def step(self, maze_action: CuttingAction) -> tuple[CuttingState, float, bool, bool, dict]:
        """Truncated at the end."""
        state, reward, done, _, info = super().step(maze_action)
        return state, reward, False, done, info


def test_step_after_truncation_says_to_reset() -> None:
    env = make_env(TruncatingCoreEnv(max_steps=1))
    env.reset()
    assert env.step({"piece_idx": 0})[3]
    with pytest.raises(EpisodeEndedError, match="call env.reset"):
        env.step({"piece_idx": 0})


# ---- 4. a missing observation key --------------------------------------------------------------------------------
class ForgetfulObservation(ObservationConversion):
    """Leaves out ``inventory_size`` after the first step."""

    def maze_to_space(self, maze_state: CuttingState) -> dict[str, np.ndarray]:
        """Without inventory_size once the raw piece was cut."""
        obs = super().maze_to_space(maze_state)
        if maze_state.inventory != [maze_state.raw_piece_size]:
            del obs["inventory_size"]
        return obs


def test_missing_observation_key_names_the_key_and_the_space() -> None:
    env = make_env(observation_conversion=ForgetfulObservation())
    env.reset()
    with pytest.raises(SpaceMismatchError, match=r"policy key 0 \(ForgetfulObservation.maze_to_space\): the "
                                                 r"observation has no key 'inventory_size' of its space "
                                                 r"Dict\('inventory': Box.*'inventory_size': Box.*return exactly the "
                                                 r"keys of the space"):
        env.step({"piece_idx": 0})


# ---- 5. a wrapper parameter typo ---------------------------------------------------------------------------------
def test_wrapper_parameter_typo_lists_the_valid_parameters() -> None:
    env = make_env()
    with pytest.raises(ConfigurationError, match=r"wrapper TimeLimitWrapper has no parameter 'max_episode_step' \(did "
                                                 r"you mean 'max_episode_steps'\?\); valid parameters of "
                                                 r"TimeLimitWrapper: max_episode_steps"):
        wrap_env(env, {"TimeLimitWrapper": {"max_episode_step": 5}})
    with pytest.raises(ConfigurationError, match=r"LogStatsWrapper has no parameter 'loging_prefix' \(did you mean "
                                                 r"'logging_prefix'\?\); valid parameters of LogStatsWrapper: "
                                                 r"logging_prefix, writers, event_log_writers"):
        wrap_env(env, {"LogStatsWrapper": {"loging_prefix": "train"}})
    from maze_lab.core.wrappers.time_limit_wrapper import TimeLimitWrapper

    # in Python as well; still a TypeError, as Python's own error for a wrong keyword is
    with pytest.raises(TypeError, match=r"no parameter 'max_steps'.*valid parameters of TimeLimitWrapper"):
        TimeLimitWrapper.wrap(env, max_steps=5)
    assert issubclass(WrapperParameterError, ConfigurationError)
    assert wrap_env(env, {"TimeLimitWrapper": {"max_episode_steps": 5}}).max_episode_steps == 5


class ScaledReward(Wrapper):
    """A user wrapper with a required parameter."""

    def __init__(self, env: Any, factor: float, offset: float = 0.0):
        super().__init__(env)
        self.factor = factor
        self.offset = offset


def test_missing_required_wrapper_parameter_is_named() -> None:
    with pytest.raises(ConfigurationError, match=r"wrapper ScaledReward needs the parameter\(s\) factor; valid "
                                                 r"parameters of ScaledReward: factor, offset"):
        wrap_env(make_env(), {f"{__name__}.ScaledReward": {"offset": 1.0}})


# ---- 6. a subclass that forgot super().__init__() ----------------------------------------------------------------
class NoSuperCoreEnv(CuttingCoreEnv):
    """The tutorial's core env without ``super().__init__()``."""

    def __init__(self) -> None:  # the mistake under test: no super().__init__()
        self.max_pieces_in_inventory = 4
        self.raw_piece_size = (4, 3)
        self.current_demand = (1, 2)
        self.max_steps = 3
        self._setup_env()


def test_core_env_without_super_init_says_to_call_it() -> None:
    with pytest.raises(TypeError, match=r"NoSuperCoreEnv is not set up as a CoreEnv: its __init__ did not call "
                                        r"super\(\).__init__\(\).*Add super\(\).__init__\(\) as the first line of "
                                        r"NoSuperCoreEnv.__init__"):
        make_env(NoSuperCoreEnv())


class Cutting2DEnvironment(MazeEnv):
    """The tutorial's MazeEnv subclass, without its super().__init__(...) call."""

    def __init__(self, core_env: CoreEnv, action_conversion: ActionConversionInterface,
                 observation_conversion: ObservationConversionInterface):
        self.my_core_env = core_env


def test_maze_env_without_super_init_says_to_call_it() -> None:
    env = Cutting2DEnvironment(CuttingCoreEnv(), ActionConversion(), ObservationConversion())
    with pytest.raises(EnvNotResetError, match="call env.reset"):
        env.step({"piece_idx": 0})
    with pytest.raises(AttributeError, match=r"Cutting2DEnvironment is not set up as a MazeEnv: its __init__ did not "
                                             r"call super\(\).__init__\(core_env=..."):
        env.reset()


class NoSuperWrapper(Wrapper):
    """A wrapper that forgot ``super().__init__(env)``."""

    def __init__(self, env: Any, scale: float = 1.0):
        self.scale = scale


def test_wrapper_without_super_init_says_to_call_it() -> None:
    wrapped = NoSuperWrapper(make_env())
    with pytest.raises(AttributeError, match=r"NoSuperWrapper has no wrapped env: its __init__ did not call "
                                             r"super\(\).__init__\(env\)"):
        wrapped.reset()


# ---- 7. an integer array of shape (1,) for a Discrete action -----------------------------------------------------
def test_discrete_action_as_integer_array_is_accepted_as_its_int() -> None:
    conversion = ActionConversion()
    env = make_env(action_conversion=conversion)
    env.reset()
    env.step({"piece_idx": np.array([0])})  # e.g. a policy or library that keeps a trailing dim of 1
    env.step({"piece_idx": np.array(0, dtype=np.int32)})
    env.step({"piece_idx": np.int64(0)})
    assert conversion.received == [0, 0, 0]
    assert [type(a) for a in conversion.received[:2]] == [int, int]  # the conversion gets a plain int


def test_ambiguous_discrete_actions_are_refused() -> None:
    env = make_env()
    env.reset()
    with pytest.raises(SpaceMismatchError, match=r"action\['piece_idx'\]: action array\(shape=\(2,\), dtype=int64\) "
                                                 r"is not in Discrete\(4\).*give one integer"):
        env.step({"piece_idx": np.array([0, 1])})
    with pytest.raises(SpaceMismatchError, match=r"array\(shape=\(1,\), dtype=float32\) is not in Discrete\(4\).*give "
                                                 r"an integer"):
        env.step({"piece_idx": np.array([1.0], dtype=np.float32)})
    with pytest.raises(SpaceMismatchError, match=r"holding 7 is not in Discrete\(4\) \(an integer in \[0, 4\)\)"):
        env.step({"piece_idx": np.array([7])})
    with pytest.raises(SpaceMismatchError, match=r"list \[1\] is not in Discrete\(4\).*not a sequence"):
        env.step({"piece_idx": [1]})
    with pytest.raises(SpaceMismatchError, match=r"bool True is not in Discrete\(4\)"):
        env.step({"piece_idx": True})


def test_integer_arrays_in_multi_head_actions_are_accepted() -> None:
    class TwoHeads(ActionConversion):
        def space_to_maze(self, action: dict[str, Any], maze_state: CuttingState) -> CuttingAction:
            self.received.append((action["piece_idx"], action["rotate"]))
            return CuttingAction(piece_id=action["piece_idx"])

        def space(self) -> gym.spaces.Dict:
            return gym.spaces.Dict({"piece_idx": gym.spaces.Discrete(4), "rotate": gym.spaces.Discrete(2)})

    conversion = TwoHeads()
    env = make_env(action_conversion=conversion)
    env.reset()
    action = {"piece_idx": np.array([1]), "rotate": 1}
    env.step(action)
    assert conversion.received == [(1, 1)] and type(conversion.received[0][0]) is int
    assert isinstance(action["piece_idx"], np.ndarray)  # the caller's dict is left as it was


# ---- more of the tutorial's code: reset() without Gymnasium's keywords, actor_id() left as `pass` ----------------
class SeedStyleResetCoreEnv(CuttingCoreEnv):
    """``reset(self)`` as in the seed's tutorial (no seed / options keywords)."""

    def reset(self) -> CuttingState:  # type: ignore[override]
        """A fresh inventory."""
        self._setup_env()
        return self.get_maze_state()


def test_reset_without_gymnasium_keywords_is_seeded_through_seed() -> None:
    core = SeedStyleResetCoreEnv()
    env = make_env(core)
    obs, _ = env.reset(seed=7)
    assert core.seeded_with == 7 and obs["inventory_size"][0] == 1
    env.reset()
    assert core.seeded_with == 7  # no seed given: seed() is not called
    with pytest.raises(TypeError, match=r"SeedStyleResetCoreEnv.reset\(\) takes no options.*reset\(self, \*, "
                                        r"seed=None, options=None\)"):
        env.reset(options={"level": 2})


class PassActorCoreEnv(CuttingCoreEnv):
    """``actor_id`` left as ``pass`` (the tutorial's first version)."""

    def actor_id(self) -> ActorID:  # type: ignore[return]
        """Not implemented yet."""


def test_actor_id_returning_none_says_what_to_return() -> None:
    env = make_env(PassActorCoreEnv())
    with pytest.raises(TypeError, match=r"PassActorCoreEnv.actor_id\(\) returned None; return the actor that acts "
                                        r"next as ActorID\(step_key, agent_id\), e.g. ActorID\(0, 0\), or remove the "
                                        r"override"):
        env.reset()


class CountObservation(ObservationConversion):
    """Adds an integer ``pieces_cut`` count declared in [0, 2] that reaches 3 on the third step."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def maze_to_space(self, maze_state: CuttingState) -> dict[str, np.ndarray]:
        """With the count."""
        obs = {**super().maze_to_space(maze_state), "pieces_cut": np.array([self.count], dtype=np.int64)}
        self.count += 1
        return obs

    def space(self) -> gym.spaces.Dict:
        """With the count in [0, 2]."""
        return gym.spaces.Dict({**super().space().spaces, "pieces_cut": gym.spaces.Box(0, 2, (1,), np.int64)})


def test_integer_box_bounds_are_checked() -> None:
    env = make_env(CuttingCoreEnv(max_steps=10), observation_conversion=CountObservation())
    env.reset()
    env.step({"piece_idx": 0})
    env.step({"piece_idx": 0})
    with pytest.raises(SpaceMismatchError, match=r"observation\['pieces_cut'\] is outside.*\[0\] = 3 not in \[0, 2\]"):
        env.step({"piece_idx": 0})
