"""The PreProcessor interface and the registry that resolves pre-processors by class name."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import gymnasium as gym

PRE_PROCESSOR_REGISTRY: dict[str, type[PreProcessor]] = {}


class PreProcessor(ABC):
    """Transforms one observation and declares the space of the result.

    Subclasses take the space of the observation they process plus their own config parameters, and are
    registered by class name so that configs can name them without a module path. The processed observation
    is called ``<observation>-<tag>``: ``tag`` is a class attribute; when a subclass does not set it, it is the
    name of the subclass's module file (``custom.py`` -> ``custom``), or, for classes defined in a notebook or
    script, the snake-case class name without the ``PreProcessor`` suffix.

    :param observation_space: the space of the observation to process.
    """

    tag: ClassVar[str] = "pre_processor"

    def __init__(self, observation_space: gym.spaces.Space):
        self.observation_space = observation_space

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "tag" not in cls.__dict__:
            module = cls.__module__.rsplit(".", 1)[-1]
            if module == "__main__":
                name = re.sub(r"pre_?processor$", "", cls.__name__, flags=re.IGNORECASE) or cls.__name__
                module = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
            cls.tag = module
        PRE_PROCESSOR_REGISTRY[cls.__name__] = cls

    @abstractmethod
    def processed_space(self) -> gym.spaces.Space:
        """The space of the processed observation."""

    @abstractmethod
    def process(self, observation: Any) -> Any:
        """The processed observation."""

    def _require_box(self) -> gym.spaces.Box:
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise TypeError(f"{type(self).__name__} needs a Box observation space, got {self.observation_space}")
        return self.observation_space

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.observation_space})"
