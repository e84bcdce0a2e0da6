"""Template model builders."""

from maze_lab.perception.builders.base import MASK_MODALITY, BaseModelBuilder
from maze_lab.perception.builders.concat import ConcatModelBuilder, ConcatModelBuilderKeys

__all__ = ["MASK_MODALITY", "BaseModelBuilder", "ConcatModelBuilder", "ConcatModelBuilderKeys"]
