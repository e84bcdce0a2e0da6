"""Which observation masks which action head: the rule shared by the template and flatten-concat policy models.

An observation masks an action head when

- it is named ``<head>_mask``, or
- it is named ``action_mask`` and the policy has exactly one Discrete action head (the common Gymnasium name), or
- the model config maps the head to it explicitly (``action_masks: {head: observation}``),

and its shape equals the shape of that head's logits (for a Discrete head: ``(n,)``). Mask values: 1 / True means
the action is allowed, 0 / False that it is masked (it gets zero probability). Every other observation whose name
ends in ``_mask`` gives a warning that names it, because a mask the model does not apply lets the policy choose
actions the env forbids.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping, Sequence

import gymnasium as gym

from maze_lab.core.utils.factory import ConfigurationError

MASK_SUFFIX = "_mask"
SINGLE_HEAD_MASK = "action_mask"


class UnmatchedActionMaskWarning(UserWarning):
    """An observation looks like an action mask but the model cannot match it to an action head."""


def discrete_heads_of(action_space: gym.spaces.Dict | Mapping[str, gym.spaces.Space]) -> list[str]:
    """The action heads of a dict action space that are Discrete."""
    spaces = action_space.spaces if isinstance(action_space, gym.spaces.Dict) else action_space
    return [h for h, s in spaces.items() if isinstance(s, gym.spaces.Discrete)]


def match_action_masks(obs_shapes: Mapping[str, Sequence[int]], action_logits_shapes: Mapping[str, Sequence[int]],
                       discrete_heads: Collection[str] | None = None, explicit: Mapping[str, str] | None = None,
                       what: str = "policy network", mask_like: Collection[str] = ()) -> dict[str, str]:
    """Action head -> the observation that masks it; warns for each ``*_mask`` observation that matches no head.

    :param obs_shapes: Shape per observation key.
    :param action_logits_shapes: Logits shape per action head.
    :param discrete_heads: The Discrete heads (for the ``action_mask`` rule); None when unknown: then the rule applies
        to a policy with a single action head.
    :param explicit: Configured ``{head: observation}`` pairs for the heads this policy has (others are skipped); a
        missing observation or a wrong shape is an error.
    :param what: The model named in messages.
    :param mask_like: Further observations that are masks whatever their name (warned about when not applied).
    """
    logits = {h: tuple(int(d) for d in s) for h, s in action_logits_shapes.items()}
    shapes = {k: tuple(int(d) for d in s) for k, s in obs_shapes.items()}
    matched: dict[str, str] = {}
    for head, key in (explicit or {}).items():
        if head not in logits:
            continue  # one config serves every policy key of a structured env; each has only some of the heads
        if key not in shapes:
            raise ConfigurationError(f"{what}: action_masks: mask '{key}' for action '{head}' is not an observation; "
                                     f"observations: {', '.join(shapes)}")
        if shapes[key] != logits[head]:
            raise ConfigurationError(f"{what}: mask '{key}' has shape {shapes[key]} but the logits of action '{head}' "
                                     f"have shape {logits[head]}; a mask needs one entry per logit")
        matched[head] = key
    problems: dict[str, str] = {}
    for head, shape in logits.items():
        key = f"{head}{MASK_SUFFIX}"
        if key not in shapes:
            continue
        if head in matched:
            problems[key] = f"action head '{head}' is already masked by '{matched[head]}' (action_masks)"
        elif shapes[key] == shape:
            matched[head] = key
        else:
            problems[key] = (f"it has shape {shapes[key]} but action head '{head}' has logits of shape {shape} "
                             f"(a mask needs one entry per logit)")
    if SINGLE_HEAD_MASK in shapes and SINGLE_HEAD_MASK not in matched.values():
        candidates = list(discrete_heads) if discrete_heads is not None else list(logits)
        candidates = [h for h in candidates if h in logits]
        if len(candidates) != 1:
            kind = "Discrete action heads" if discrete_heads is not None else "action heads"
            problems[SINGLE_HEAD_MASK] = (f"'{SINGLE_HEAD_MASK}' masks the single Discrete action head, but this "
                                          f"policy has {len(candidates)} {kind} ({', '.join(candidates) or 'none'})")
        elif candidates[0] in matched:
            head = candidates[0]
            problems[SINGLE_HEAD_MASK] = f"action head '{head}' is already masked by '{matched[head]}'"
        elif shapes[SINGLE_HEAD_MASK] != logits[candidates[0]]:
            problems[SINGLE_HEAD_MASK] = (f"it has shape {shapes[SINGLE_HEAD_MASK]} but action head '{candidates[0]}' "
                                          f"has logits of shape {logits[candidates[0]]}")
        else:
            matched[candidates[0]] = SINGLE_HEAD_MASK
    used = set(matched.values())
    for key in shapes:
        if (key.endswith(MASK_SUFFIX) or key in mask_like) and key not in used:
            reason = problems.get(key) or (f"no action head is named '{key[: -len(MASK_SUFFIX)]}'"
                                           if key.endswith(MASK_SUFFIX) else "no action head is mapped to it")
            warnings.warn(
                f"{what}: observation '{key}' looks like an action mask but is not applied: {reason}. Action heads: "
                f"{', '.join(f'{h} {s}' for h, s in logits.items())}. A mask is applied when it is named "
                f"'<head>_mask' (or '{SINGLE_HEAD_MASK}' for a single Discrete head) with the head's logits shape; "
                f"otherwise map it in the model config with action_masks: {{<head>: {key}}}. Without it the policy "
                f"may choose masked actions.", UnmatchedActionMaskWarning, stacklevel=2)
    return {h: matched[h] for h in logits if h in matched}
