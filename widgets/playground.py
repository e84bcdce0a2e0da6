"""The env playground: step any maze-lab or Gymnasium env by hand, or let a policy act, and see what each step did.

``EnvPlayground(env, policy=None, seed=None)`` shows the env's picture, the observation of the actor that acts next
(one row per key), one control per action head of that actor's action space, and what the last step gave: reward,
return, terminated/truncated, info, the step's events and the KPIs of the episode so far. The controls follow the
action space of the current sub-step (a structured env such as Cutting-2D switches between its policy keys):

- ``Discrete``: a row of buttons; an action the observation masks is disabled (greyed). Where the sub-step has this
  one head, a click is the step; otherwise a click selects and the ``step`` button steps;
- ``Box``: a slider per entry within the bounds (a number field where a bound is infinite; one text field of
  comma-separated numbers for a Box of more than 16 entries);
- ``MultiBinary``: a checkbox per entry; ``MultiDiscrete``: a dropdown per entry.

Which observation masks which head follows maze-lab's rule (:mod:`maze_lab.perception.action_masks`): ``<head>_mask``,
``action_mask`` for a single Discrete head, the ``action_masks`` the policy's network applies or its run's model
config names, the ``action_masks={head: observation}`` given here, and, last, a ``*_mask`` observation whose length
matches exactly one Discrete head (the head's label says where its mask comes from). Gymnasium's
``info["action_mask"]`` masks a single Discrete head too.

Undo replays: the playground keeps the actions taken since the last reset and goes back to step ``k`` by resetting
with the same seed and taking the first ``k`` actions again (maze-lab envs have no state cloning). That is exact for
envs that are deterministic given their seed; where a replayed observation differs from the one seen before, the
playground says so. A reset without a seed draws one (shown in the header), so that undo works there too.

"Let the policy act" takes one step, or N steps, with the policy's action. For a TorchPolicy (a run's policy) the
probabilities of the current observation are shown per head (a bar per action of a Discrete head, per entry of a
MultiBinary head, mean and standard deviation of a Box head), and the action taken is drawn from exactly that
distribution. A run directory given as ``policy`` is loaded as :func:`maze_lab.run.runs.load_run` loads it: its
config instantiates only what maze-lab's allow-list and ``trust`` permit.

An error of the env (or of the policy, or of the drawing) shows as one line in the playground; the Python methods
(:meth:`EnvPlayground.step`, :meth:`~EnvPlayground.reset`, ...) also raise it.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import ipywidgets as w
import numpy as np

from maze_lab.core.env.structured_env import ActorID, StepKey
from maze_lab.core.policy import Policy
from maze_lab.core.trajectory.frames import encode_png
from maze_lab.widgets.theme import MUTED, TEXT, themed
from maze_lab.widgets.trajectory_data import short_text
from maze_lab.widgets.view import close_tree

_PANEL_CSS = ("font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 13px; line-height: 1.45; "
              f"color: {TEXT};")
_ERROR_CSS = ("border-left: 4px solid #cf222e; background: #ffebe9; padding: 3px 8px; font-family: system-ui, "
              "sans-serif; font-size: 13px; color: #82071e; white-space: nowrap; overflow: hidden; "
              "text-overflow: ellipsis;")
_NOTE_CSS = ("background: #fef9e7; border-left: 4px solid #f1c40f; padding: 3px 8px; margin: 2px 0; "
             "font-family: system-ui, sans-serif; font-size: 12px; color: #4d3b00;")
_BAR_COLOUR = "#2e86c1"
_CHOSEN_COLOUR = "#1e8449"
_MASKED_COLOUR = "#d5d8dc"
MAX_BUTTONS = 64
"""Discrete heads with more actions get a number field instead of a row of buttons."""
MAX_SLIDERS = 16
"""Box heads with more entries get one text field of comma-separated numbers instead of a slider per entry."""
_HOW = {"policy": "the policy applies it", "run config": "named in the run's model config",
        "name": "by its name", "shape": "found by its length"}
"""How a mask was found, as the head's label says it (nothing for masks given to the playground)."""
_STYLE = """<style>
.maze-lab-playground .maze-lab-pg-action:not(:disabled) { border: 1px solid #7fb3d5; font-weight: 600; }
.maze-lab-playground .maze-lab-pg-action.maze-lab-pg-masked { opacity: 0.35; text-decoration: line-through; }
.maze-lab-playground .maze-lab-pg-history select { font-size: 12px; }
</style>"""
"""Allowed actions stand out from masked ones (which are struck through as well as disabled)."""


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _one_line(err: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message``, shortened: what the playground shows of an error."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(value: Any, precision: int = 4) -> str:
    """A short text of an observation, action or info value (arrays summarised past 24 values)."""
    return short_text(value, precision, threshold=24, line_width=64)


def _css_name(text: Any) -> str:
    """A CSS class fragment of a head name (letters, digits, ``-`` and ``_``)."""
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in str(text))


def _same(a: Any, b: Any) -> bool:
    """Whether two observations are equal (dicts of arrays; NaN equals NaN)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return False
        return bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f" and y.dtype.kind == "f"))
    except Exception:  # noqa: BLE001 - objects numpy cannot compare: compare as Python does
        return bool(a == b)


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def _actor_text(actor: ActorID, structured: bool) -> str:
    if not structured:
        return "agent" if actor.agent_id == 0 else f"agent {actor.agent_id}"
    return f"policy key {actor.step_key}" + (f" · agent {actor.agent_id}" if actor.agent_id else "")


def _action_text(action: Any) -> str:
    if isinstance(action, Mapping):
        return ", ".join(f"{k}={_fmt(v, 3)}" for k, v in action.items())
    return _fmt(action, 3)


# ---- envs and policies -----------------------------------------------------------------------------------------

def _is_maze_env(obj: Any) -> bool:
    return all(hasattr(obj, name) for name in ("action_spaces_dict", "actor_id", "step", "reset"))


def playground_env(env: Any) -> tuple[Any, bool]:
    """The env to play with as a maze-lab env, and whether the playground made it (then it closes it).

    :param env: a maze-lab env (MazeEnv, structured env or wrapper stack), a ``gymnasium.Env``, a registered Gymnasium
        env id, or a factory (a callable without arguments) returning one of those.
    """
    from maze_lab.core.wrappers.gym_maze_env import GymMazeEnv

    made = False
    if isinstance(env, str):
        return GymMazeEnv(env, render_mode="rgb_array"), True
    if callable(env) and not _is_maze_env(env) and not isinstance(env, gym.Env):
        env, made = env(), True
    if _is_maze_env(env):
        return env, made
    if isinstance(env, gym.Env):
        return GymMazeEnv(env), made  # closing the adapter would close the Gymnasium env the user gave
    raise TypeError(f"EnvPlayground needs a maze-lab env (MazeEnv, a structured env or a wrapper stack), a "
                    f"gymnasium.Env, a registered Gymnasium env id such as 'CartPole-v1', or a factory returning one "
                    f"of those; got {type(env).__name__}")


def _policy_masks(policy: Any) -> dict[StepKey, dict[str, str]]:
    """Head -> mask observation per policy key, as the policy's networks apply them (ActionMaskingBlocks, the
    ``action_masks`` of flatten-concat networks); empty where the policy has no torch networks."""
    networks = getattr(policy, "networks", None)
    if not isinstance(networks, Mapping):
        return {}
    try:
        from maze_lab.perception.blocks.general import ActionMaskingBlock
    except Exception:  # noqa: BLE001 - no torch: no networks to look into
        return {}
    found: dict[StepKey, dict[str, str]] = {}
    for key, net in networks.items():
        step = key.step_key if isinstance(key, ActorID) else key
        masks = found.setdefault(step, {})
        modules = net.modules() if hasattr(net, "modules") else ()
        for module in modules:
            explicit = getattr(module, "action_masks", None)
            if isinstance(explicit, Mapping):
                masks.update({str(h): str(o) for h, o in explicit.items() if isinstance(o, str)})
            if isinstance(module, ActionMaskingBlock):
                masks.setdefault(str(module.out_keys[0]), str(module.in_keys[1]))
    return {k: v for k, v in found.items() if v}


def _config_masks(cfg: Any) -> dict[str, str]:
    """Every ``action_masks: {head: observation}`` of a model config (read as data, nothing instantiated)."""
    found: dict[str, str] = {}
    if isinstance(cfg, Mapping):
        for key, value in cfg.items():
            if key == "action_masks" and isinstance(value, Mapping):
                found.update({str(h): str(o) for h, o in value.items() if isinstance(o, str)})
            else:
                found.update(_config_masks(value))
    elif isinstance(cfg, list | tuple):
        for item in cfg:
            found.update(_config_masks(item))
    return found


@dataclass(frozen=True)
class MaskSource:
    """Where the mask of a Discrete head comes from."""

    observation: str
    """The observation key holding the mask (or ``info['action_mask']``)."""
    how: str
    """``given`` (the playground's ``action_masks``), ``policy`` (the policy's network applies it), ``run config``,
    ``name`` (maze-lab's naming rule), ``shape`` (the only Discrete head of its length) or ``info``."""


def resolve_action_masks(observation_spaces: Mapping[StepKey, gym.spaces.Dict],
                         action_spaces: Mapping[StepKey, gym.spaces.Dict], given: Mapping[Any, Any] | None = None,
                         from_policy: Mapping[StepKey, Mapping[str, str]] | None = None,
                         from_config: Mapping[str, str] | None = None
                         ) -> tuple[dict[StepKey, dict[str, MaskSource]], list[str]]:
    """Which observation masks which Discrete head, per policy key, and notes on ``*_mask`` observations that mask
    nothing.

    :param given: ``{head: observation}`` for every policy key with that head, or ``{policy key: {head: observation}}``;
        a head that is not Discrete, or an observation that is not there or has the wrong length, is an error.
    """
    from maze_lab.perception.action_masks import MASK_SUFFIX, match_action_masks

    def discrete(key: StepKey) -> dict[str, int]:
        return {h: int(s.n) for h, s in action_spaces[key].spaces.items() if isinstance(s, gym.spaces.Discrete)}

    def fits(key: StepKey, head: str, obs: str) -> str | None:
        spaces = observation_spaces[key].spaces
        if obs not in spaces and obs.endswith("_flat") and obs[: -len("_flat")] in spaces:
            obs = obs[: -len("_flat")]  # a flatten-concat network's flattened copy of the mask
        shape = getattr(spaces.get(obs), "shape", None)
        return obs if shape is not None and int(np.prod(shape)) == discrete(key).get(head) else None

    per_key: dict[Any, dict[str, str]] = {}
    if given:
        if all(isinstance(v, Mapping) for v in given.values()):
            per_key = {k: dict(v) for k, v in given.items()}
            unknown_keys = [k for k in per_key if k not in action_spaces]
            if unknown_keys:
                raise ValueError(f"action_masks: {unknown_keys} are not policy keys of the env; its policy keys: "
                                 f"{list(action_spaces)}")
        else:
            per_key = {k: {h: o for h, o in given.items() if h in action_spaces[k].spaces} for k in action_spaces}
            heads = {h for space in action_spaces.values() for h in space.spaces}
            unknown = sorted(str(h) for h in given if h not in heads)
            if unknown:
                raise ValueError(f"action_masks: {unknown} are not action heads; the env's Discrete heads: "
                                 f"{ {k: list(discrete(k)) for k in action_spaces} }")
    masks: dict[StepKey, dict[str, MaskSource]] = {}
    notes: list[str] = []
    for key in action_spaces:
        heads = discrete(key)
        obs_spaces = observation_spaces[key].spaces
        chosen: dict[str, MaskSource] = {}
        for head, obs in (per_key.get(key) or {}).items():
            if head not in heads:
                raise ValueError(f"action_masks: head '{head}' of policy key {key!r} is not a Discrete head; its "
                                 f"Discrete heads: {list(heads)}")
            ok = fits(key, head, obs)
            if ok is None:
                raise ValueError(f"action_masks: '{obs}' cannot mask '{head}' (policy key {key!r}): a mask is an "
                                 f"observation with one entry per action ({heads[head]}); observations: "
                                 f"{ {k: tuple(getattr(s, 'shape', ()) or ()) for k, s in obs_spaces.items()} }")
            chosen[head] = MaskSource(ok, "given")
        for source, how in (((from_policy or {}).get(key) or {}, "policy"), (from_config or {}, "run config")):
            for head, obs in source.items():
                ok = fits(key, head, obs) if head in heads else None
                if ok is not None and head not in chosen:
                    chosen[head] = MaskSource(ok, how)
        shapes = {k: tuple(int(d) for d in s.shape) for k, s in obs_spaces.items()
                  if getattr(s, "shape", None) is not None}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the notes below say it in the playground's own words
            try:
                named = match_action_masks(shapes, {h: (n,) for h, n in heads.items()}, list(heads))
            except Exception:  # noqa: BLE001 - a rule that does not apply gives no mask
                named = {}
        for head, obs in named.items():
            chosen.setdefault(head, MaskSource(obs, "name"))
        used = {s.observation for s in chosen.values()}
        for obs, shape in shapes.items():
            if not obs.endswith(MASK_SUFFIX) or obs in used:
                continue
            candidates = [h for h, n in heads.items() if h not in chosen and int(np.prod(shape)) == n]
            if len(candidates) == 1:
                chosen[candidates[0]] = MaskSource(obs, "shape")
                used.add(obs)
            else:
                which = (f"its length fits {len(candidates)} Discrete heads ({' and '.join(candidates)})"
                         if candidates else "no unmasked Discrete head has its length")
                notes.append(f"Observation <code>{_esc(obs)}</code> (policy key {_esc(key)}) looks like an action "
                             f"mask but greys no buttons: {_esc(which)}. Say which head it masks: "
                             f"<code>EnvPlayground(..., action_masks={{'&lt;head&gt;': '{_esc(obs)}'}})</code>.")
        masks[key] = chosen
    return masks, notes


def _draw_seed() -> int:
    return int(np.random.SeedSequence().entropy % (2**31 - 1))


# ---- controls ------------------------------------------------------------------------------------------------

class HeadControl:
    """The control of one action head; :meth:`value` is the action for that head."""

    kind = "none"

    def __init__(self, head: str, space: gym.spaces.Space):
        self.head, self.space = head, space
        self.widget: w.Widget = w.HTML()
        self.enabled = True

    def value(self) -> Any:
        """The head's action as the env takes it."""
        raise ValueError(f"action head '{self.head}' ({self.space}) has no control in the playground: let the "
                         f"policy act, or call playground.step({{...}}) with the action")

    def set_value(self, value: Any) -> None:
        """Show ``value`` (e.g. the policy's action) in the control."""

    def set_mask(self, allowed: np.ndarray | None) -> None:
        """Grey out what the mask does not allow (Discrete heads only)."""

    def set_enabled(self, enabled: bool) -> None:
        """Enable or disable the whole control (an ended episode disables it)."""
        self.enabled = enabled
        for child in _descendants(self.widget):
            if hasattr(child, "disabled"):
                child.disabled = not enabled


def _descendants(widget: Any) -> list[Any]:
    out = [widget]
    for child in getattr(widget, "children", ()) or ():
        out.extend(_descendants(child))
    return out


class DiscreteControl(HeadControl):
    """A row of buttons, one per action (a number field for more than :data:`MAX_BUTTONS` actions)."""

    kind = "discrete"

    def __init__(self, head: str, space: gym.spaces.Discrete, immediate: bool, on_pick: Callable[[dict], None],
                 labels: list[str] | None = None, max_buttons: int = MAX_BUTTONS):
        super().__init__(head, space)
        self.n, self.start = int(space.n), int(getattr(space, "start", 0))
        self.immediate = immediate
        self._on_pick = on_pick
        self.allowed = np.ones(self.n, dtype=bool)
        self.selected = self.start
        self.buttons: list[w.Button] = []
        self.number: w.BoundedIntText | None = None
        if self.n <= max_buttons:
            for i in range(self.n):
                value = self.start + i
                label = str(value) if not labels or i >= len(labels) else f"{value}: {labels[i]}"
                button = w.Button(description=label, tooltip=f"{head} = {value}",
                                  layout=w.Layout(width="auto", min_width="36px", height="28px", margin="1px",
                                                  padding="0 6px"))
                button.add_class("maze-lab-pg-action")
                button.add_class(f"maze-lab-pg-head-{_css_name(head)}")
                button.add_class(f"maze-lab-pg-value-{value}")
                button.on_click(lambda _b, v=value: self._click(v))
                self.buttons.append(button)
            self.widget = w.HBox(self.buttons, layout=w.Layout(flex_flow="row wrap", max_width="560px"))
            self._show_selection()
        else:
            self.number = w.BoundedIntText(value=self.start, min=self.start, max=self.start + self.n - 1,
                                           layout=w.Layout(width="120px"))
            self.number.add_class(f"maze-lab-pg-head-{_css_name(head)}")
            self.widget = self.number

    def _click(self, value: int) -> None:
        if self.immediate:
            self._on_pick({self.head: value})
        else:
            self.set_value(value)

    def value(self) -> int:
        """The selected action."""
        if self.number is not None:
            return int(self.number.value)
        return int(self.selected)

    def set_value(self, value: Any) -> None:
        """Select ``value``."""
        self.selected = int(np.asarray(value).reshape(-1)[0])
        if self.number is not None:
            self.number.value = self.selected
        self._show_selection()

    def _show_selection(self) -> None:
        if self.immediate:
            return  # a click steps: nothing stays selected
        for i, button in enumerate(self.buttons):
            button.button_style = "info" if self.start + i == self.selected else ""

    def set_mask(self, allowed: np.ndarray | None) -> None:
        """Disable (grey) the buttons of masked actions; a masked selection moves to the first allowed action."""
        self.allowed = np.ones(self.n, dtype=bool) if allowed is None else np.asarray(allowed, dtype=bool)
        for i, button in enumerate(self.buttons):
            ok = bool(self.allowed[i])
            button.disabled = not (ok and self.enabled)
            if ok:
                button.remove_class("maze-lab-pg-masked")
                button.tooltip = f"{self.head} = {self.start + i}"
            else:
                button.add_class("maze-lab-pg-masked")
                button.tooltip = f"{self.head} = {self.start + i}: masked"
        if not self.allowed[self.selected - self.start] and self.allowed.any():
            self.set_value(self.start + int(np.argmax(self.allowed)))

    def set_enabled(self, enabled: bool) -> None:
        """Enable or disable the buttons (masked ones stay disabled)."""
        self.enabled = enabled
        for i, button in enumerate(self.buttons):
            button.disabled = not (enabled and self.allowed[i])
        if self.number is not None:
            self.number.disabled = not enabled


class BoxControl(HeadControl):
    """A slider per entry within the bounds, a number field where a bound is infinite, or one text field for more
    than :data:`MAX_SLIDERS` entries."""

    kind = "box"

    def __init__(self, head: str, space: gym.spaces.Box, max_sliders: int = MAX_SLIDERS):
        super().__init__(head, space)
        self.shape = tuple(space.shape)
        self.size = int(np.prod(self.shape)) if self.shape else 1
        low = np.broadcast_to(space.low, self.shape).reshape(-1).astype(np.float64)
        high = np.broadcast_to(space.high, self.shape).reshape(-1).astype(np.float64)
        integer = np.issubdtype(space.dtype, np.integer)
        self.text: w.Text | None = None
        self.fields: list[w.Widget] = []
        if self.size > max_sliders:
            start = np.clip(np.zeros(self.size), low, high)
            self.text = w.Text(value=", ".join(_fmt(float(v), 4) for v in start), placeholder="comma-separated",
                               layout=w.Layout(width="420px"))
            self.widget = self.text
            return
        for i in range(self.size):
            name = head if self.size == 1 else f"[{i}]"
            lo, hi = low[i], high[i]
            start = float(np.clip(0.0, lo, hi))
            style = {"description_width": "44px"}
            if np.isfinite(lo) and np.isfinite(hi):
                if integer:
                    field = w.IntSlider(value=int(start), min=int(lo), max=int(hi), description=name, style=style,
                                        layout=w.Layout(width="360px"))
                else:
                    field = w.FloatSlider(value=start, min=float(lo), max=float(hi), step=(hi - lo) / 200 or 0.01,
                                          description=name, readout_format=".3g", continuous_update=False,
                                          style=style, layout=w.Layout(width="360px"))
            else:
                kind = w.IntText if integer else w.FloatText
                field = kind(value=int(start) if integer else start, description=name, style=style,
                             layout=w.Layout(width="200px"))
                field.add_class("maze-lab-pg-unbounded")
            field.add_class(f"maze-lab-pg-head-{_css_name(head)}")
            self.fields.append(field)
        self.widget = w.VBox(self.fields)

    def value(self) -> np.ndarray:
        """The entries as an array of the space's shape and dtype."""
        if self.text is not None:
            try:
                values = [float(v) for v in self.text.value.replace(";", ",").split(",") if v.strip()]
            except ValueError:
                raise ValueError(f"action head '{self.head}': type {self.size} numbers separated by commas, got "
                                 f"{self.text.value!r}") from None
            if len(values) != self.size:
                raise ValueError(f"action head '{self.head}' needs {self.size} numbers (shape {self.shape}), got "
                                 f"{len(values)}")
        else:
            values = [f.value for f in self.fields]
        return np.asarray(values, dtype=self.space.dtype).reshape(self.shape)

    def set_value(self, value: Any) -> None:
        """Show ``value``."""
        flat = np.asarray(value, dtype=np.float64).reshape(-1)
        if self.text is not None:
            self.text.value = ", ".join(_fmt(float(v), 4) for v in flat)
            return
        for f, v in zip(self.fields, flat, strict=False):
            f.value = int(v) if isinstance(f, w.IntSlider | w.IntText) else float(v)


class MultiBinaryControl(HeadControl):
    """A checkbox per entry."""

    kind = "multi_binary"

    def __init__(self, head: str, space: gym.spaces.MultiBinary):
        super().__init__(head, space)
        self.shape = tuple(np.atleast_1d(space.n)) if not space.shape else tuple(space.shape)
        size = int(np.prod(self.shape))
        self.boxes = [w.Checkbox(value=False, description=f"[{i}]", indent=False,
                                 layout=w.Layout(width="auto", margin="0 10px 0 0")) for i in range(size)]
        for box in self.boxes:
            box.add_class(f"maze-lab-pg-head-{_css_name(head)}")
        self.widget = w.HBox(self.boxes, layout=w.Layout(flex_flow="row wrap", max_width="560px"))

    def value(self) -> np.ndarray:
        """The entries as 0/1 of the space's shape (int8, as MultiBinary samples)."""
        return np.asarray([int(b.value) for b in self.boxes], dtype=np.int8).reshape(self.shape)

    def set_value(self, value: Any) -> None:
        """Tick the entries that are 1."""
        for box, v in zip(self.boxes, np.asarray(value).reshape(-1), strict=False):
            box.value = bool(v)


class MultiDiscreteControl(HeadControl):
    """A dropdown per entry."""

    kind = "multi_discrete"

    def __init__(self, head: str, space: gym.spaces.MultiDiscrete):
        super().__init__(head, space)
        nvec = np.asarray(space.nvec)
        self.shape = nvec.shape
        starts = np.broadcast_to(np.asarray(getattr(space, "start", 0)), nvec.shape).reshape(-1)
        self.menus = [w.Dropdown(options=list(range(int(s), int(s) + int(n))), value=int(s), description=f"[{i}]",
                                 style={"description_width": "30px"}, layout=w.Layout(width="120px"))
                      for i, (n, s) in enumerate(zip(nvec.reshape(-1), starts, strict=True))]
        for menu in self.menus:
            menu.add_class(f"maze-lab-pg-head-{_css_name(head)}")
        self.widget = w.HBox(self.menus, layout=w.Layout(flex_flow="row wrap", max_width="560px"))

    def value(self) -> np.ndarray:
        """The entries as an int64 array of the space's shape."""
        return np.asarray([m.value for m in self.menus], dtype=np.int64).reshape(self.shape)

    def set_value(self, value: Any) -> None:
        """Select the entries of ``value``."""
        for menu, v in zip(self.menus, np.asarray(value).reshape(-1), strict=False):
            if int(v) in menu.options:
                menu.value = int(v)


# ---- history ---------------------------------------------------------------------------------------------------

@dataclass
class PlaygroundStep:
    """One action taken since the last reset (a sub-step of a structured env)."""

    actor_id: ActorID
    """Who acted."""
    action: dict[str, Any]
    """The action, as given to the env."""
    observation: dict[str, Any]
    """The observation after the step (of the actor that acts next)."""
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    events: list[Any]
    """The events the env recorded during this step (EventRecords)."""
    env_time: int | None
    """The env time (full env steps) after the step."""
    by_policy: bool = False
    """Whether the policy chose the action."""
    probabilities: dict[str, dict[str, Any]] | None = None
    """The policy's distribution the action was drawn from (see :meth:`EnvPlayground.policy_distribution`)."""
    kpis: dict[str, float] = field(default_factory=dict)
    """The KPIs of the episode up to this step (where the env has a KPI calculator)."""


# ---- the playground ------------------------------------------------------------------------------------------

class EnvPlayground:
    """Step an env by hand, or let a policy act, and see the picture, observation, reward, events and KPIs of each
    step (see the module's description).

    :param env: a maze-lab env (MazeEnv, structured env or wrapper stack, e.g. Cutting-2D's
        ``make_masked_env(...)``), a ``gymnasium.Env`` (made with ``render_mode="rgb_array"`` for a picture), a
        registered Gymnasium env id, or a factory returning one of those. None takes the env of the run directory
        given as ``policy`` (with the run's wrappers).
    :param policy: a maze-lab policy (``RunContext(...).policy``, a ``TorchPolicy``, any ``Policy``), an object with
        such a ``.policy``, or a run directory (its ``best`` or ``last`` weights, see ``which``).
    :param seed: the seed of the first reset (None: one is drawn and shown).
    :param action_masks: ``{head: observation}`` (or ``{policy key: {head: observation}}``) for masks that maze-lab's
        naming rule does not find (Cutting-2D's ``cutting_mask`` masks ``cut_rotation``).
    :param trust: for a run directory: modules of your own its config may instantiate (as for ``load_run``).
    :param which: for a run directory: ``best`` or ``last`` weights.
    :param deterministic: the policy takes its most likely action (unticked in the playground: it samples).
    :param dpi: resolution of pictures drawn by the env's renderer.
    """

    def __init__(self, env: Any = None, policy: Any = None, seed: int | None = None, *,
                 action_masks: Mapping[Any, Any] | None = None, trust: Iterable[str] | str | None = None,
                 which: str = "best", deterministic: bool = True, dpi: int = 72):
        self.run = None
        """The loaded run (``policy`` given as a run directory), else None."""
        config_masks: dict[str, str] = {}
        if isinstance(policy, str | Path):
            from maze_lab.run.runs import load_run

            self.run = load_run(policy, trust=trust)
            policy_obj = self.run.policy(which)
            config_masks = _config_masks(self.run.directory.read_config().get("model"))
        elif policy is None or isinstance(policy, Policy):
            policy_obj = policy
        elif hasattr(getattr(policy, "policy", None), "compute_action"):
            policy_obj = policy.policy  # a RunContext (its own compute_action takes other arguments)
        elif hasattr(policy, "compute_action"):
            policy_obj = policy
        else:
            raise TypeError(f"policy must be a maze-lab Policy (with compute_action), an object with such a .policy "
                            f"(a RunContext) or a run directory, got {type(policy).__name__}")
        if env is None:
            if self.run is None:
                raise TypeError("EnvPlayground needs an env (a maze-lab env, a gymnasium.Env, an env id or a "
                                "factory), or a run directory as policy to take the run's env from")
            env, self._owns_env = self.run.env_factory().build_env(), True
        else:
            env, self._owns_env = playground_env(env)
        self.env = env
        """The env played with (a maze-lab env; Gymnasium envs are wrapped in a GymMazeEnv)."""
        self.policy = policy_obj
        """The policy that acts on "let the policy act" (None: none)."""
        self.dpi = int(dpi)
        self.structured = len(env.action_spaces_dict) > 1 or any(n != 1 for n in env.agent_counts_dict.values())
        self.masks, self.mask_notes = resolve_action_masks(env.observation_spaces_dict, env.action_spaces_dict,
                                                           action_masks, _policy_masks(policy_obj), config_masks)
        """Head -> :class:`MaskSource` per policy key; ``mask_notes`` says which ``*_mask`` observations mask
        nothing."""
        self.history: list[PlaygroundStep] = []
        """The actions taken since the last reset, with what each gave."""
        self.seed: int | None = None
        """The seed of the last reset (drawn where none was given)."""
        self.seed_drawn = False
        self.observation: dict[str, Any] = {}
        """The observation of the actor that acts next."""
        self._reset_observation: dict[str, Any] = {}
        self.reset_events: list[Any] = []
        self.error = ""
        """The last error, in one line ("" after a step that went well)."""
        self.last_exception: BaseException | None = None
        self.replay_note = ""
        """Where the last undo's replay saw another observation than before ("" where it matched)."""
        self.probabilities: dict[str, dict[str, Any]] | None = None
        """The policy's distribution for the current observation per head (None: no policy, or one without
        probabilities); Discrete heads: ``{"kind": "categorical", "probs": array, "start": int}``."""
        self.png: bytes | None = None
        """The picture shown (PNG bytes)."""
        self.picture_kind = "none"
        self._episode = 0
        self._events_list: list | None = None
        self._events_n = 0
        self._dist_cache: tuple[Any, Any, Any] | None = None
        self._step_start_state: Any = None
        self._env_step_open: list[Any] = []
        self._env_step_logs: list[list[Any]] = []
        self._env_step_rewards: list[float] = []
        self._open_reward = 0.0
        self._last_env_step: tuple[Any, Any, list[Any]] | None = None
        self._kpis: dict[str, float] = {}
        self._batch = False
        self._task: asyncio.Task | None = None
        self._stop_requested = False
        self._closed = False
        self._groups: dict[StepKey, tuple[w.Widget, dict[str, HeadControl], w.Button | None]] = {}
        self._gym = self._frame_env()
        self._renderer = None
        if self._gym is None:
            with contextlib.suppress(Exception):
                self._renderer = env.get_renderer() if callable(getattr(env, "get_renderer", None)) else None
        self._build_widgets(deterministic)
        if seed is not None:
            self.seed_text.value = str(int(seed))
        self._guard(lambda: self.reset(seed))

    # ---- widgets ---------------------------------------------------------------------------------------------
    def _build_widgets(self, deterministic: bool) -> None:
        self.header = w.HTML()
        self.header.add_class("maze-lab-pg-header")
        self.seed_text = w.Text(value="", placeholder="random", description="seed", style={"description_width": "36px"},
                                layout=w.Layout(width="170px"))
        self.seed_text.add_class("maze-lab-pg-seed")
        self.reset_button = w.Button(description="reset", icon="refresh", tooltip="reset the env with this seed",
                                     layout=w.Layout(width="90px"))
        self.reset_button.add_class("maze-lab-pg-reset")
        self.reset_button.on_click(lambda _: self._guard(self._reset_clicked))
        self.undo_button = w.Button(description="undo", icon="undo", tooltip="take back the last action (replays "
                                    "the others from the reset)", layout=w.Layout(width="90px"))
        self.undo_button.add_class("maze-lab-pg-undo")
        self.undo_button.on_click(lambda _: self._guard(lambda: self.undo(1)))
        self.picture_mode = w.Dropdown(options=[("the step just taken", "step"), ("the state to act in", "state")],
                                       value="step", description="picture", style={"description_width": "50px"},
                                       layout=w.Layout(width="260px"))
        self.picture_mode.observe(lambda _: self._guard(self._draw), names="value")
        if self._renderer is None:
            self.picture_mode.layout.display = "none"  # frames show the env as it is now: nothing to choose
        self.error_html = w.HTML(layout=w.Layout(display="none"))
        self.error_html.add_class("maze-lab-pg-error")
        self.note_html = w.HTML()
        self.image = w.Image(format="png", layout=w.Layout(max_width="720px", height="auto"))
        self.image.add_class("maze-lab-pg-picture")
        self.picture_note = w.HTML()
        self.action_box = w.VBox(layout=w.Layout(width="100%"))
        self.action_box.add_class("maze-lab-pg-actions")
        # the policy
        self.act_button = w.Button(description="policy acts", icon="play", button_style="success",
                                   tooltip="one step with the policy's action", layout=w.Layout(width="120px"))
        self.act_button.add_class("maze-lab-pg-act")
        self.act_button.on_click(lambda _: self._guard(lambda: self.act(1)))
        self.act_n = w.BoundedIntText(value=10, min=1, max=100_000, layout=w.Layout(width="80px"))
        self.act_n.add_class("maze-lab-pg-act-n")
        self.act_n_button = w.Button(description="steps", icon="forward", tooltip="let the policy take this many "
                                     "steps (it stops at the episode's end)", layout=w.Layout(width="90px"))
        self.act_n_button.add_class("maze-lab-pg-act-many")
        self.act_n_button.on_click(lambda _: self._guard(self._act_many_clicked))
        self.deterministic = w.Checkbox(value=bool(deterministic), description="most likely action", indent=False,
                                        layout=w.Layout(width="auto"))
        self.probs_html = w.HTML()
        self.probs_html.add_class("maze-lab-pg-probs")
        where = str(self.run.path) if self.run is not None else ""
        policy_title = w.HTML(f"<div style=\"{_PANEL_CSS}\"><b>let the policy act</b> "
                              f"<span style='color:{MUTED}' title='{_esc(where)}'>{_esc(self._policy_label())}"
                              f"</span></div>")
        self.policy_box = w.VBox([policy_title,
                                  w.HBox([self.act_button, self.act_n, self.act_n_button, self.deterministic],
                                         layout=w.Layout(align_items="center", flex_flow="row wrap")),
                                  self.probs_html],
                                 layout=w.Layout(border_top="1px solid #d0d7de", margin="8px 0 0 0",
                                                 padding="6px 0 0 0"))
        self.policy_box.add_class("maze-lab-pg-policy")
        if self.policy is None:
            self.policy_box.layout.display = "none"
        # what the last step gave, the observation, the history
        self.obs_html = w.HTML(layout=w.Layout(min_width="320px", max_width="520px", overflow="auto"))
        self.obs_html.add_class("maze-lab-pg-observation")
        self.step_html = w.HTML(layout=w.Layout(min_width="280px", max_width="460px", overflow="auto"))
        self.step_html.add_class("maze-lab-pg-step-info")
        self.history_list = w.Select(options=[("0 · reset", 0)], value=0, rows=9,
                                     layout=w.Layout(width="400px"))
        self.history_list.add_class("maze-lab-pg-history")
        self.go_back_button = w.Button(description="go back here", icon="history",
                                       tooltip="undo every action after the selected one (replays from the reset)",
                                       layout=w.Layout(width="140px"))
        self.go_back_button.add_class("maze-lab-pg-go-back")
        self.go_back_button.on_click(lambda _: self._guard(lambda: self.go_to(int(self.history_list.value or 0))))
        history_box = w.VBox([w.HTML(f"<div style=\"{_PANEL_CSS}\"><b>actions since the reset</b></div>"),
                              self.history_list, self.go_back_button])
        toolbar = w.HBox([self.seed_text, self.reset_button, self.undo_button, self.picture_mode],
                         layout=w.Layout(align_items="center", flex_flow="row wrap"))
        right = w.VBox([w.HTML(f"<div style=\"{_PANEL_CSS}\"><b>your action</b></div>"), self.action_box,
                        self.policy_box], layout=w.Layout(min_width="380px", max_width="600px", padding="0 0 0 12px"))
        left = w.VBox([self.image, self.picture_note], layout=w.Layout(max_width="730px"))
        style = w.HTML(_STYLE, layout=w.Layout(display="none"))
        self.widget = w.VBox([
            style, self.header, toolbar, self.error_html, self.note_html,
            w.HBox([left, right], layout=w.Layout(flex_flow="row wrap", align_items="flex-start")),
            w.HBox([self.obs_html, self.step_html, history_box],
                   layout=w.Layout(flex_flow="row wrap", align_items="flex-start", margin="6px 0 0 0",
                                   grid_gap="16px")),
        ])
        """The whole playground (display it, or put it in a layout)."""
        self.widget.add_class("maze-lab-playground")
        themed(self.widget)
        notes = [f"<div style=\"{_NOTE_CSS}\">{n}</div>" for n in self.mask_notes]
        self.note_html.value = "".join(notes)

    def _policy_label(self) -> str:
        if self.policy is None:
            return ""
        if self.run is not None:
            path = Path(self.run.path)
            return f"run {path.parent.name}/{path.name}" if path.parent.name else f"run {path}"
        return type(self.policy).__name__

    def _group(self, actor: ActorID) -> tuple[w.Widget, dict[str, HeadControl], w.Button | None]:
        """The controls of an actor's action space (built once per policy key)."""
        key = actor.step_key
        if key in self._groups:
            return self._groups[key]
        space = self.env.action_spaces_dict[key]
        heads = dict(space.spaces)
        immediate = len(heads) == 1 and isinstance(next(iter(heads.values())), gym.spaces.Discrete)
        labels = self._action_labels()
        controls: dict[str, HeadControl] = {}
        rows = []
        for head, sub in heads.items():
            if isinstance(sub, gym.spaces.Discrete):
                control: HeadControl = DiscreteControl(head, sub, immediate, self._step_clicked,
                                                       labels if len(heads) == 1 else None)
            elif isinstance(sub, gym.spaces.Box):
                control = BoxControl(head, sub)
            elif isinstance(sub, gym.spaces.MultiBinary):
                control = MultiBinaryControl(head, sub)
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                control = MultiDiscreteControl(head, sub)
            else:
                control = HeadControl(head, sub)
                control.widget = w.HTML(f"<span style='color:{MUTED}'>no control for {_esc(sub)}: let the policy "
                                        f"act</span>")
            controls[head] = control
            source = self.masks.get(key, {}).get(head)
            mask = (f" · masked by <code>{_esc(source.observation)}</code>"
                    + (f" <span style='color:{MUTED}'>({_esc(_HOW[source.how])})</span>" if source.how in _HOW else "")
                    if source is not None else "")
            label = w.HTML(f"<div style=\"{_PANEL_CSS}\"><code style='font-weight:600'>{_esc(head)}</code> "
                           f"<span style='color:{MUTED};font-size:12px'>{_esc(_space_text(sub))}{mask}</span></div>")
            rows.append(w.VBox([label, control.widget], layout=w.Layout(margin="2px 0 4px 0")))
        step_button = None
        if not immediate:
            step_button = w.Button(description="step", icon="step-forward", button_style="primary",
                                   tooltip="step with the action above", layout=w.Layout(width="100px"))
            step_button.add_class("maze-lab-pg-step")
            step_button.on_click(lambda _: self._guard(lambda: self.step(self.chosen_action())))
            rows.append(step_button)
        title = w.HTML(f"<div style=\"{_PANEL_CSS};color:{MUTED};font-size:12px\">{_esc(_actor_text(actor, True))}"
                       f"</div>") if self.structured else w.HTML()
        group = w.VBox([title, *rows])
        group.add_class(f"maze-lab-pg-key-{_css_name(key)}")
        self._groups[key] = (group, controls, step_button)
        return self._groups[key]

    def _action_labels(self) -> list[str] | None:
        meanings = getattr(getattr(self._gym, "unwrapped", None), "get_action_meanings", None)
        if callable(meanings):
            with contextlib.suppress(Exception):
                return [str(m) for m in meanings()]
        return None

    # ---- what the env is now -----------------------------------------------------------------------------------
    @property
    def actor_id(self) -> ActorID:
        """The actor that acts next."""
        return ActorID(*self.env.actor_id())

    @property
    def done(self) -> bool:
        """Whether the episode ended (the last step returned terminated or truncated)."""
        return bool(self.history) and (self.history[-1].terminated or self.history[-1].truncated)

    @property
    def terminated(self) -> bool:
        """Whether the last step returned terminated."""
        return bool(self.history) and self.history[-1].terminated

    @property
    def truncated(self) -> bool:
        """Whether the last step returned truncated."""
        return bool(self.history) and self.history[-1].truncated

    @property
    def step_count(self) -> int:
        """Actions taken since the reset (sub-steps of a structured env)."""
        return len(self.history)

    @property
    def env_steps(self) -> int:
        """Full env steps since the reset (the env time)."""
        time = self._env_time()
        return time if time is not None else len(self.history)

    @property
    def episode_return(self) -> float:
        """The sum of the rewards since the reset."""
        return float(sum(s.reward for s in self.history))

    @property
    def last_reward(self) -> float | None:
        """The reward of the last step (None right after a reset)."""
        return self.history[-1].reward if self.history else None

    @property
    def last_events(self) -> list[Any]:
        """The events of the last step (of the reset, right after one)."""
        return self.history[-1].events if self.history else self.reset_events

    @property
    def kpis(self) -> dict[str, float]:
        """The KPIs of the episode so far (empty where the env has no KPI calculator)."""
        return dict(self._kpis)

    @property
    def controls(self) -> dict[str, HeadControl]:
        """The controls of the current actor's action heads."""
        return self._group(self.actor_id)[1]

    def buttons(self, head: str) -> list[w.Button]:
        """The buttons of a Discrete head of the current actor."""
        control = self.controls[head]
        if not isinstance(control, DiscreteControl):
            raise TypeError(f"action head '{head}' is a {control.kind} head; buttons are the controls of Discrete "
                            f"heads")
        return control.buttons

    def mask(self, head: str) -> np.ndarray | None:
        """The allowed actions of a Discrete head of the current actor (True = allowed), None where nothing masks
        it."""
        actor = self.actor_id
        source = self.masks.get(actor.step_key, {}).get(head)
        space = self.env.action_spaces_dict[actor.step_key].spaces.get(head)
        if not isinstance(space, gym.spaces.Discrete):
            return None
        n = int(space.n)
        if source is not None:
            value = self.observation.get(source.observation)
        elif self.history and len(self.env.action_spaces_dict[actor.step_key].spaces) == 1:
            value = self.history[-1].info.get("action_mask") if isinstance(self.history[-1].info, Mapping) else None
        else:
            value = None
        if value is None:
            return None
        arr = np.asarray(value).reshape(-1)
        return arr != 0 if arr.size == n else None

    def chosen_action(self) -> dict[str, Any]:
        """The action the controls show now (for the current actor)."""
        return {head: control.value() for head, control in self.controls.items()}

    def _env_time(self) -> int | None:
        fn = getattr(self.env, "get_env_time", None)
        if not callable(fn):
            return None
        try:
            return int(fn())
        except Exception:  # noqa: BLE001 - an env without a time: the playground counts actions instead
            return None

    def _new_events(self) -> list[Any]:
        """The events the env recorded since the last look (the env's step list, as the trajectory recorder reads
        it: a new list is a new step)."""
        fn = getattr(self.env, "get_step_events", None)
        events = fn() if callable(fn) else None
        if events is None:
            return []
        if events is not self._events_list:
            self._events_list, self._events_n = events, 0
        new = list(events[self._events_n:])
        self._events_n = len(events)
        return new

    def _maze_state(self) -> Any:
        fn = getattr(self.env, "get_maze_state", None)
        return fn() if callable(fn) else None

    # ---- acting -------------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> dict[str, Any]:
        """Reset the env with ``seed`` (None: a drawn one, shown in the header) and forget the history."""
        self._stop_task()
        drawn = seed is None
        seed = _draw_seed() if drawn else int(seed)
        try:
            self._reset_env(seed)
        finally:
            self.seed, self.seed_drawn = seed, drawn
            self.replay_note = ""
            self._refresh()
        return self.observation

    def _reset_env(self, seed: int) -> None:
        self.history = []
        self._episode += 1
        self._dist_cache = None
        self._env_step_open, self._env_step_logs, self._env_step_rewards = [], [], []
        self._open_reward = 0.0
        self._last_env_step, self._kpis = None, {}
        self._events_list = None
        self.observation = {}
        obs, _info = self.env.reset(seed=seed)
        self.observation = self._reset_observation = _copy(obs)
        self.reset_events = self._new_events()
        self._env_step_open = list(self.reset_events)  # events of the reset count towards the first step
        self._step_start_state = self._maze_state()
        if self.policy is not None and callable(getattr(self.policy, "reset", None)):
            self.policy.reset()

    def step(self, action: Mapping[str, Any] | Any, *, by_policy: bool = False,
             probabilities: dict[str, dict[str, Any]] | None = None) -> PlaygroundStep:
        """Take one action (a dict of action heads; a bare value for an env with one head) and show what it gave."""
        if self.done:
            raise RuntimeError("the episode ended (the last step returned "
                               f"{'terminated' if self.terminated else 'truncated'}): reset, or undo")
        entry = self._step_env(action, by_policy, probabilities)
        if not self._batch:
            self._refresh()
        return entry

    def _step_env(self, action: Any, by_policy: bool, probabilities: dict | None) -> PlaygroundStep:
        actor = self.actor_id
        heads = list(self.env.action_spaces_dict[actor.step_key].spaces)
        if not isinstance(action, Mapping):
            if len(heads) != 1:
                raise TypeError(f"give the action as a dict of its heads {heads}, got {type(action).__name__}")
            action = {heads[0]: action}
        action = {k: (v.item() if isinstance(v, np.ndarray) and v.ndim == 0 and isinstance(
            self.env.action_spaces_dict[actor.step_key].spaces.get(k), gym.spaces.Discrete) else v)
            for k, v in action.items()}
        time_before = self._env_time()
        start_state = self._step_start_state
        obs, reward, terminated, truncated, info = self.env.step(action)
        events = self._new_events()
        time_after = self._env_time()
        entry = PlaygroundStep(actor, _copy(dict(action)), _copy(obs), float(reward), bool(terminated),
                               bool(truncated), dict(info) if isinstance(info, Mapping) else {"info": info}, events,
                               time_after, by_policy, probabilities)
        self.history.append(entry)
        self.observation = entry.observation
        self._dist_cache = None
        self._env_step_open.extend(events)
        self._open_reward += entry.reward
        if time_after is None or time_after != time_before or terminated or truncated:
            self._env_step_logs.append(self._env_step_open)
            self._env_step_rewards.append(self._open_reward)
            action_fn = getattr(self.env, "get_maze_action", None)
            maze_action = action_fn() if callable(action_fn) else None
            self._last_env_step = (start_state, maze_action, list(self._env_step_open))
            self._env_step_open, self._open_reward = [], 0.0
            self._step_start_state = self._maze_state()
            self._kpis = self._compute_kpis()
        entry.kpis = dict(self._kpis)
        return entry

    def _compute_kpis(self) -> dict[str, float]:
        fn = getattr(self.env, "get_kpi_calculator", None)
        calc = fn() if callable(fn) else None
        if calc is None:
            return {}
        from maze_lab.core.log_stats.event_log import EpisodeEventLog

        log = EpisodeEventLog(self._episode, list(self._env_step_logs), list(self._env_step_rewards))
        return {str(k): float(v) for k, v in calc.calculate_kpis(log, self._maze_state()).items()}

    def undo(self, n: int = 1) -> dict[str, Any]:
        """Take back the last ``n`` actions (replays the others from the reset, see the module's description)."""
        if not self.history:
            raise RuntimeError("nothing to undo: no action was taken since the reset")
        return self.go_to(max(len(self.history) - int(n), 0))

    def go_to(self, step: int) -> dict[str, Any]:
        """Go back to the state after the first ``step`` actions since the reset (0: right after the reset): reset
        with the same seed and take those actions again; returns the observation."""
        if not 0 <= step <= len(self.history):
            raise IndexError(f"step {step} does not exist: {len(self.history)} actions were taken since the reset "
                             f"(0..{len(self.history)})")
        self._stop_task()
        old = self.history[:step]
        seed = self.seed if self.seed is not None else _draw_seed()
        self.replay_note = ""
        self._batch = True
        try:
            self._reset_env(seed)
            for i, before in enumerate(old):
                if _actor_differs(self.actor_id, before.actor_id):
                    self.replay_note = (f"the replay went another way at action {i + 1}: the env asked "
                                        f"{self.actor_id} to act, not {before.actor_id} as before (is the env "
                                        f"deterministic given its seed?)")
                    break
                entry = self._step_env(before.action, before.by_policy, before.probabilities)
                if not _same(entry.observation, before.observation) and not self.replay_note:
                    self.replay_note = (f"the replayed observation after action {i + 1} differs from the one seen "
                                        f"before: the env is not deterministic given its seed, so the state shown "
                                        f"is the replayed one")
        finally:
            self._batch = False
            self._refresh()
        return self.observation

    # ---- the policy -----------------------------------------------------------------------------------------
    def policy_distribution(self) -> dict[str, dict[str, Any]] | None:
        """The policy's action distribution at the current observation, per head (None where the policy gives
        none): ``categorical`` (``probs``, ``start``), ``multi_categorical`` (``probs``: one array per entry),
        ``bernoulli`` (``probs``: of a 1 per entry), ``gaussian`` (``mean``, ``std``) or ``other``."""
        dist = self._distribution()
        return None if dist is None else dist[1]

    def _distribution(self) -> tuple[Any, dict[str, dict[str, Any]]] | None:
        """(torch distribution, its per-head summary) for the current observation, cached per state."""
        key = (self._episode, len(self.history))
        if self._dist_cache is not None and self._dist_cache[0] == key:
            return self._dist_cache[1]
        policy = self.policy
        result = None
        if policy is not None and callable(getattr(policy, "compute_substep_policy_output", None)) \
                and callable(getattr(policy, "obs_to_torch", None)):
            import torch

            with torch.no_grad():
                out = policy.compute_substep_policy_output(policy.obs_to_torch(self.observation), self.actor_id,
                                                           temperature=getattr(policy, "temperature", 1.0))
            result = (out.prob_dist, _summarize(out.prob_dist))
        self._dist_cache = (key, result)
        return result

    def act(self, n: int = 1, deterministic: bool | None = None) -> int:
        """Let the policy take ``n`` steps (fewer where the episode ends); returns the steps taken.

        :param deterministic: the most likely action (default: the playground's checkbox) instead of a sample.
        """
        if self.policy is None:
            raise RuntimeError("no policy: give one as EnvPlayground(env, policy=...) (a policy or a run directory)")
        taken = 0
        self._batch = True  # one picture at the end
        try:
            for _ in range(int(n)):
                if self.done:
                    break
                self._act_once(deterministic)
                taken += 1
        finally:
            self._batch = False
            self._refresh()
        return taken

    def _act_once(self, deterministic: bool | None) -> PlaygroundStep:
        if deterministic is None:
            deterministic = bool(self.deterministic.value)
        dist = self._distribution()
        if dist is not None:
            sample = dist[0].deterministic_sample() if deterministic else dist[0].sample()
            action = {k: _to_numpy(v) for k, v in sample.items()}
            probabilities = dist[1]
        else:
            policy = self.policy
            needs_state = callable(getattr(policy, "needs_state", None)) and policy.needs_state()
            needs_env = callable(getattr(policy, "needs_env", None)) and policy.needs_env()
            action = policy.compute_action(self.observation, actor_id=self.actor_id,
                                           maze_state=self._maze_state() if needs_state else None,
                                           env=self.env if needs_env else None, deterministic=deterministic)
            probabilities = None
        return self.step(action, by_policy=True, probabilities=probabilities)

    def _act_many_clicked(self) -> None:
        if self._task is not None and not self._task.done():
            self._stop_requested = True  # the button reads "stop" while the policy acts
            return
        n = int(self.act_n.value)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a script clicking): all steps now, one picture at the end
            self.act(n)
            return
        self._stop_requested = False
        self._task = loop.create_task(self._act_steps(n))

    async def _act_steps(self, n: int) -> None:
        """The policy's steps one per turn of the kernel's loop, each shown, until ``n``, the episode's end, a click
        on stop, or an error."""
        self.act_n_button.description, self.act_n_button.icon = "stop", "stop"
        try:
            for _ in range(n):
                if self._stop_requested or self.done or self._closed:
                    break
                if not self._guard(lambda: self._act_once(None)):
                    break
                await asyncio.sleep(0)  # the kernel handles a click on stop (and sends the picture) in between
        finally:
            self.act_n_button.description, self.act_n_button.icon = "steps", "forward"
            self.act_button.disabled = self.act_n_button.disabled = self.done
            self._stop_requested = False

    def _stop_task(self) -> None:
        if self._task is not None and not self._task.done() and self._task is not _current_task():
            self._task.cancel()
            self.act_n_button.description, self.act_n_button.icon = "steps", "forward"
        self._task = None

    # ---- clicks --------------------------------------------------------------------------------------------
    def _step_clicked(self, action: dict[str, Any]) -> None:
        self._guard(lambda: self.step(action))

    def _reset_clicked(self) -> None:
        text = self.seed_text.value.strip()
        if text:
            try:
                seed = int(text)
            except ValueError:
                raise ValueError(f"the seed must be a whole number (or empty for a random one), got {text!r}") from None
        else:
            seed = None
        self.reset(seed)

    def _guard(self, fn: Callable[[], Any]) -> bool:
        """Run ``fn``; an error shows as one line in the playground instead of a traceback. Returns whether it
        went well."""
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - the env's (or policy's) error, shown where the user looks
            self._show_error(err)
            return False
        return True

    def _show_error(self, err: BaseException) -> None:
        self.last_exception = err
        self.error = _one_line(err)
        hint = " · undo replays the steps before it" if self.history else ""
        self.error_html.value = (f"<div style=\"{_ERROR_CSS}\" title=\"{_esc(self.error)}\"><b>error</b> "
                                 f"{_esc(self.error)}<span style='color:{MUTED}'>{hint}</span></div>")
        self.error_html.layout.display = None

    # ---- drawing ------------------------------------------------------------------------------------------
    def _refresh(self) -> None:
        """Redraw everything from the current state (after a reset, a step, an undo)."""
        if self._closed:
            return
        self.error, self.last_exception = "", None
        self.error_html.value, self.error_html.layout.display = "", "none"
        problems = []
        for what, fn in (("the controls", self._show_controls), ("the policy", self._show_policy),
                         ("the picture", self._draw)):
            try:
                fn()
            except Exception as err:  # noqa: BLE001 - one broken part must not hide the others
                problems.append((what, err))
        self._show_history()
        self._show_observation()
        self._show_step()
        self._show_header()
        if problems:
            what, err = problems[0]
            self._show_error(type(err)(f"{what}: {err}") if _rebuildable(err) else err)

    def _show_controls(self) -> None:
        if not self.observation and not self.history:
            self.action_box.children = ()
            return
        actor = self.actor_id
        group, controls, step_button = self._group(actor)
        enabled = not self.done
        for head, control in controls.items():
            control.set_enabled(enabled)
            control.set_mask(self.mask(head))
        if step_button is not None:
            step_button.disabled = not enabled
        if self.done:
            ended = "terminated" if self.terminated else "truncated"
            self.action_box.children = (w.HTML(f"<div style=\"{_NOTE_CSS}\">The episode ended ({ended}): reset, "
                                               f"or undo to go back.</div>"), group)
        else:
            self.action_box.children = (group,)
        self.undo_button.disabled = not self.history

    def _show_policy(self) -> None:
        if self.policy is None:
            return
        acting = self._task is not None and not self._task.done()
        self.act_button.disabled = self.done or acting
        self.act_n_button.disabled = self.done and not acting
        if not self.observation:
            self.probs_html.value = ""
            return
        if self.done:
            self.probabilities = None
            self.probs_html.value = f"<div style=\"{_PANEL_CSS};color:{MUTED}\">the episode ended</div>"
            return
        self.probabilities = self.policy_distribution()
        if self.probabilities is None:
            self.probs_html.value = (f"<div style=\"{_PANEL_CSS};color:{MUTED}\">{_esc(type(self.policy).__name__)} "
                                     f"gives no probabilities; it acts with compute_action</div>")
            return
        actor = self.actor_id
        masks = {h: self.mask(h) for h in self.probabilities}
        parts = [f"<div style=\"{_PANEL_CSS};color:{MUTED};font-size:12px;margin:2px 0\">the policy's probabilities at "
                 f"this observation ({_esc(_actor_text(actor, self.structured))})</div>"]
        for head, summary in self.probabilities.items():
            parts.append(_summary_html(head, summary, masks.get(head)))
        self.probs_html.value = "".join(parts)

    def _frame_env(self) -> Any:
        """The Gymnasium env whose RGB frames picture the env (None: the env draws itself, or has no picture)."""
        inner = getattr(self.env, "unwrapped", self.env)
        gym_env = getattr(inner, "gym_env", None)
        if isinstance(gym_env, gym.Env) and getattr(gym_env, "render_mode", None) == "rgb_array":
            return gym_env
        return None

    def picture(self) -> bytes | None:
        """The picture of the env now as PNG bytes: the Gymnasium env's frame, or the env's renderer drawing the
        step just taken (``picture`` set to "step") or the state to act in; None where there is none."""
        if self._gym is not None:
            frame = self._gym.render()
            self.picture_kind = "frame"
            return None if frame is None else encode_png(np.asarray(frame, dtype=np.uint8)[..., :3], level=1)
        if self._renderer is not None:
            self.picture_kind = "renderer"
            last = self._last_env_step
            took_step = bool(self.history) and last is not None and self.history[-1].env_time is not None \
                and self._env_step_open == []
            if self.picture_mode.value == "step" and took_step:
                state, action, events = last
                fig = self._renderer.render(state, action, events=events)
            else:
                fig = self._renderer.render(self._maze_state(), None)
            return self._savefig(fig)
        render = getattr(self.env, "render", None)
        if callable(render):
            frame = render()
            if isinstance(frame, np.ndarray) and frame.ndim == 3:
                self.picture_kind = "frame"
                return encode_png(frame.astype(np.uint8)[..., :3], level=1)
        self.picture_kind = "none"
        return None

    def _savefig(self, fig: Any) -> bytes:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        try:
            fig.set_dpi(self.dpi)
            canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
            canvas.draw()
            return encode_png(np.asarray(canvas.buffer_rgba())[..., :3], level=1)
        finally:
            fig.clear()

    def _draw(self) -> None:
        if self._batch:
            return
        self.picture_note.value = ""
        try:
            png = self.picture()
        except Exception:
            self.png = None
            self.image.layout.display = "none"
            raise
        self.png = png
        if png is None:
            self.image.layout.display = "none"
            why = ("the Gymnasium env was made without render_mode='rgb_array'" if getattr(
                getattr(self.env, "unwrapped", None), "gym_env", None) is not None else "the env has no renderer")
            self.picture_note.value = f"<div style=\"{_NOTE_CSS}\">No picture: {_esc(why)}.</div>"
            return
        self.image.value = png
        self.image.layout.display = None

    def _show_header(self) -> None:
        env_name = type(getattr(self.env, "unwrapped", self.env)).__name__
        outer = type(self.env).__name__
        spec = getattr(self._gym, "spec", None)
        gym_id = getattr(spec, "id", "") if spec is not None else ""
        name = f"{env_name} ({gym_id})" if gym_id else (outer if outer == env_name else f"{outer} · {env_name}")
        seed = f"seed {self.seed}" + (" (drawn)" if self.seed_drawn else "") if self.seed is not None else "not reset"
        if self.done:
            state = "terminated" if self.terminated else "truncated"
            badge = f"<span style='background:#cf222e;color:#fff;padding:1px 9px;border-radius:10px'>{state}</span>"
        elif self.observation:
            badge = (f"<span style='background:#1a7f37;color:#fff;padding:1px 9px;border-radius:10px'>next: "
                     f"{_esc(_actor_text(self.actor_id, self.structured))}</span>")
        else:
            badge = ""
        counts = f"env step {self.env_steps}" + (f" · {self.step_count} actions" if self.structured else "")
        self.header.value = (f"<div style=\"{_PANEL_CSS}\"><b style='font-size:15px'>Env playground</b> · "
                             f"{_esc(name)} · {_esc(seed)} · <span class='maze-lab-pg-count'>{counts}</span> · "
                             f"return <span class='maze-lab-pg-return'>{self.episode_return:.4g}</span> "
                             f"{badge}</div>")

    def _show_history(self) -> None:
        options = [(f"0 · reset (seed {self.seed})", 0)]
        for i, s in enumerate(self.history, start=1):
            who = "policy" if s.by_policy else "you"
            actor = f"key {s.actor_id.step_key}: " if self.structured else ""
            end = " · terminated" if s.terminated else " · truncated" if s.truncated else ""
            options.append((f"{i} · {actor}{_action_text(s.action)} · r {s.reward:.3g} · {who}{end}", i))
        self.history_list.options = options
        self.history_list.value = len(self.history)
        self.go_back_button.disabled = not self.history

    def _show_observation(self) -> None:
        # the observation this actor saw last (a structured env's actors observe different keys)
        seen = [self._reset_observation, *(h.observation for h in self.history[:-1])]
        before = next((o for o in reversed(seen) if o.keys() == self.observation.keys()), None) \
            if self.history else None
        actor = self.actor_id if self.observation else None
        rows = []
        for key, value in self.observation.items():
            arr = np.asarray(value) if not isinstance(value, Mapping) else None
            shape = f"{arr.dtype} {tuple(arr.shape)}" if arr is not None and arr.dtype != object else ""
            changed = before is not None and key in before and not _same(before[key], value)
            masks = actor is not None and any(s.observation == key for s in self.masks.get(actor.step_key, {}).values())
            mark = " <span title='changed by the last step' style='color:#b9770e'>●</span>" if changed else ""
            tag = f" <span style='color:{MUTED};font-size:11px'>mask</span>" if masks else ""
            rows.append(f"<tr style='border-top:1px solid #eaecef'><td style='padding:2px 8px 2px 0;vertical-align:"
                        f"top;white-space:nowrap'><code>{_esc(key)}</code>{mark}{tag}<br><span style='color:{MUTED};"
                        f"font-size:11px'>{_esc(shape)}</span></td><td style='padding:2px 0;vertical-align:top'>"
                        f"<pre style='margin:0;font-size:11.5px;line-height:1.3;white-space:pre'>"
                        f"{_esc(_fmt(value))}</pre></td></tr>")
        who = f" of {_esc(_actor_text(actor, self.structured))}" if actor is not None and self.structured else ""
        self.obs_html.value = (f"<div style=\"{_PANEL_CSS}\"><b>observation{who}</b><table style='border-collapse:"
                               f"collapse;margin-top:2px'>{''.join(rows)}</table></div>")

    def _show_step(self) -> None:
        parts = []
        if not self.history:
            parts.append("<b>after the reset</b>")
        else:
            s = self.history[-1]
            who = "the policy" if s.by_policy else "you"
            flags = []
            if s.terminated:
                flags.append("<span style='color:#cf222e'>terminated</span>")
            if s.truncated:
                flags.append("<span style='color:#cf222e'>truncated</span>")
            parts.append(f"<b>the last step</b> <span style='color:{MUTED}'>({_esc(who)}, "
                         f"{_esc(_actor_text(s.actor_id, self.structured))})</span>")
            rows = [("action", f"<code>{_esc(_action_text(s.action))}</code>"),
                    ("reward", f"<span class='maze-lab-pg-reward'>{s.reward:.4g}</span>"),
                    ("return", f"{self.episode_return:.4g}"),
                    ("steps", f"{self.env_steps} env steps" + (f", {self.step_count} actions" if self.structured
                                                                 else "")),
                    ("ended", ", ".join(flags) or "no")]
            if s.info:
                rows.append(("info", f"<code>{_esc(_fmt(s.info, 3))}</code>"))
            parts.append("<table>" + "".join(f"<tr><th style='text-align:left;padding-right:10px;font-weight:500;"
                                             f"color:{MUTED}'>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>")
        events = self.last_events
        if events:
            items = "".join(f"<li><code>{_esc(_event_name(e))}</code> {_esc(_fmt(getattr(e, 'attributes', {}), 3))}"
                            f"</li>" for e in events[:30])
            more = f"<li>… {len(events) - 30} more</li>" if len(events) > 30 else ""
            parts.append(f"<div style='margin-top:6px'><b>events</b><ul class='maze-lab-pg-events' "
                         f"style='margin:2px 0;padding-left:18px'>{items}{more}</ul></div>")
        else:
            parts.append(f"<div style='margin-top:6px;color:{MUTED}'>no events in this step</div>")
        if self._kpis:
            what = "KPIs of the episode" if self.done else "KPIs of the episode so far"
            items = "".join(f"<li><code>{_esc(k)}</code> {v:.4g}</li>" for k, v in self._kpis.items())
            parts.append(f"<div style='margin-top:6px'><b>{what}</b><ul class='maze-lab-pg-kpis' style='margin:2px 0;"
                         f"padding-left:18px'>{items}</ul></div>")
        if self.replay_note:
            parts.append(f"<div style=\"{_NOTE_CSS}\">{_esc(self.replay_note)}</div>")
        self.step_html.value = f"<div style=\"{_PANEL_CSS}\">{''.join(parts)}</div>"

    # ---- display and close --------------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def close(self) -> None:
        """Stop the policy's steps, close the widgets and the env the playground made (an env instance of
        yours stays open)."""
        self._closed = True
        self._stop_task()
        close_tree(self.widget)
        for group, _, _ in self._groups.values():
            close_tree(group)
        if self._owns_env:
            with contextlib.suppress(Exception):
                self.env.close()


def _actor_differs(a: Any, b: Any) -> bool:
    return tuple(a) != tuple(b)


def _current_task() -> asyncio.Task | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def _rebuildable(err: BaseException) -> bool:
    """Whether ``type(err)(message)`` makes the same kind of error (to prefix what failed)."""
    try:
        type(err)("x")
    except Exception:  # noqa: BLE001 - errors with other constructors keep their own message
        return False
    return True


def _event_name(event: Any) -> str:
    name = getattr(event, "name", None)
    if isinstance(name, str):
        return name
    cls = getattr(getattr(event, "interface_class", None), "__name__", "?")
    method = getattr(getattr(event, "interface_method", None), "__name__", "?")
    return f"{cls}.{method}"


def _space_text(space: gym.spaces.Space) -> str:
    if isinstance(space, gym.spaces.Discrete):
        start = int(getattr(space, "start", 0))
        return f"Discrete({int(space.n)})" + (f" from {start}" if start else "")
    if isinstance(space, gym.spaces.Box):
        low, high = np.unique(space.low), np.unique(space.high)
        bounds = (f"[{_fmt(float(low[0]), 3)}, {_fmt(float(high[0]), 3)}]" if low.size == 1 and high.size == 1
                  else "bounds per entry")
        return f"Box {tuple(space.shape)} {bounds}"
    return str(space)


def _to_numpy(t: Any) -> Any:
    arr = t.detach().cpu().numpy()
    return arr[()] if arr.ndim == 0 else arr


def _summarize(dist: Any) -> dict[str, dict[str, Any]]:
    """Per head of a DictProbabilityDistribution: what the playground shows of it (see
    :meth:`EnvPlayground.policy_distribution`)."""
    out: dict[str, dict[str, Any]] = {}
    for head, d in getattr(dist, "distribution_dict", {}).items():
        name = type(d).__name__
        if hasattr(d, "categoricals"):
            out[head] = {"kind": "multi_categorical",
                         "probs": [c.probs.detach().cpu().numpy().astype(np.float64) for c in d.categoricals],
                         "starts": [int(c.start) for c in d.categoricals]}
        elif hasattr(d, "probs") and hasattr(d, "n"):
            out[head] = {"kind": "categorical", "probs": d.probs.detach().cpu().numpy().astype(np.float64),
                         "start": int(getattr(d, "start", 0))}
        elif "Bernoulli" in name:
            out[head] = {"kind": "bernoulli", "probs": d.dist.probs.detach().cpu().numpy().astype(np.float64)}
        elif hasattr(getattr(d, "dist", None), "mean") and hasattr(getattr(d, "dist", None), "stddev"):
            try:
                mean = d.deterministic_sample().detach().cpu().numpy().astype(np.float64)
            except Exception:  # noqa: BLE001 - the mode is what a deterministic action is; without one, the mean
                mean = d.dist.mean.detach().cpu().numpy().astype(np.float64)
            out[head] = {"kind": "gaussian", "mean": mean,
                         "std": d.dist.stddev.detach().cpu().numpy().astype(np.float64), "name": name}
        else:
            out[head] = {"kind": "other", "name": name}
    return out


def _summary_html(head: str, summary: dict[str, Any], allowed: np.ndarray | None) -> str:
    kind = summary["kind"]
    title = f"<code style='font-weight:600'>{_esc(head)}</code>"
    if kind == "categorical":
        probs = summary["probs"]
        best = int(np.argmax(probs))
        text = f"most likely {summary['start'] + best} (p = {probs[best]:.3f})"
        return (f"<div style=\"{_PANEL_CSS}\">{title} <span style='color:{MUTED};font-size:12px'>{_esc(text)}</span>"
                f"{_bars_svg(probs, summary['start'], allowed, head)}</div>")
    if kind == "multi_categorical":
        rows = "".join(_bars_svg(p, s, None, f"{head}[{i}]") for i, (p, s) in
                       enumerate(zip(summary["probs"], summary["starts"], strict=True)))
        return (f"<div style=\"{_PANEL_CSS}\">{title} <span style='color:{MUTED};font-size:12px'>per entry</span>"
                f"{rows}</div>")
    if kind == "bernoulli":
        probs = np.asarray(summary["probs"]).reshape(-1)
        return (f"<div style=\"{_PANEL_CSS}\">{title} <span style='color:{MUTED};font-size:12px'>probability of a "
                f"1 per entry</span>{_bars_svg(probs, 0, None, head, normalised=False)}</div>")
    if kind == "gaussian":
        mean = np.asarray(summary["mean"]).reshape(-1)
        std = np.asarray(summary["std"]).reshape(-1)
        rows = "".join(f"<tr><td>[{i}]</td><td>{m:.4g}</td><td>{s:.3g}</td></tr>"
                       for i, (m, s) in enumerate(zip(mean[:16], std[:16], strict=True)))
        return (f"<div style=\"{_PANEL_CSS}\">{title} <span style='color:{MUTED};font-size:12px'>"
                f"{_esc(summary.get('name', ''))}</span><table class='maze-lab-pg-gaussian' style='font-size:12px'>"
                f"<tr><th></th><th style='padding:0 8px'>action</th><th>std</th></tr>{rows}</table></div>")
    name = _esc(summary.get("name", ""))
    return f"<div style=\"{_PANEL_CSS}\">{title} <span style='color:{MUTED}'>{name}</span></div>"


def _bars_svg(probs: np.ndarray, start: int, allowed: np.ndarray | None, head: str, normalised: bool = True) -> str:
    """A bar per action (or entry): its probability on a 0..1 axis; the most likely in green, masked ones as a grey
    tick under the axis."""
    probs = np.asarray(probs, dtype=np.float64).reshape(-1)
    n = probs.size
    width, height, left, bottom = 520, 78, 30, 16
    bar = max(min((width - left) / max(n, 1), 40.0), 2.0)
    inner = bar * n
    best = int(np.argmax(probs)) if normalised and n else -1
    parts = [f"<svg width='{left + inner + 4:.0f}' height='{height + bottom}' class='maze-lab-pg-bars' "
             f"data-head='{_esc(head)}' style='display:block;margin:2px 0 6px 0;font-family:system-ui,sans-serif'>",
             f"<line x1='{left}' y1='{height}' x2='{left + inner}' y2='{height}' stroke='#999' stroke-width='1'/>",
             f"<line x1='{left}' y1='4' x2='{left + inner}' y2='4' stroke='#eee' stroke-width='1'/>",
             f"<text x='{left - 4}' y='{height}' font-size='10' text-anchor='end' style='fill:{MUTED}'>0</text>",
             f"<text x='{left - 4}' y='10' font-size='10' text-anchor='end' style='fill:{MUTED}'>1</text>"]
    label_every = 1 if n <= 20 else 5 if n <= 100 else 10
    for i, p in enumerate(probs):
        x = left + i * bar
        h = max(float(p), 0.0) * (height - 4)
        masked = allowed is not None and i < len(allowed) and not allowed[i]
        colour = _MASKED_COLOUR if masked else _CHOSEN_COLOUR if i == best else _BAR_COLOUR
        tip = f"{head} = {start + i}: p = {p:.4f}" + (" (masked)" if masked else "")
        parts.append(f"<rect x='{x + bar * 0.12:.1f}' y='{height - h:.2f}' width='{bar * 0.76:.1f}' "
                     f"height='{max(h, 0.0):.2f}' fill='{colour}' data-p='{p:.6f}'><title>{_esc(tip)}</title></rect>")
        if masked:
            parts.append(f"<rect x='{x + bar * 0.12:.1f}' y='{height + 1}' width='{bar * 0.76:.1f}' height='2' "
                         f"fill='#aab0b6'/>")
        if i % label_every == 0:
            parts.append(f"<text x='{x + bar / 2:.1f}' y='{height + bottom - 3}' font-size='10' text-anchor='middle' "
                         f"style='fill:{TEXT}'>{start + i}</text>")
    parts.append("</svg>")
    return "".join(parts)

