"""Built-in observation pre-processors (registered by class name for configs)."""

from maze_lab.core.wrappers.observation_preprocessing.preprocessors.base import PRE_PROCESSOR_REGISTRY, PreProcessor
from maze_lab.core.wrappers.observation_preprocessing.preprocessors.flatten import FlattenPreProcessor
from maze_lab.core.wrappers.observation_preprocessing.preprocessors.one_hot import OneHotPreProcessor
from maze_lab.core.wrappers.observation_preprocessing.preprocessors.resize_img import ResizeImgPreProcessor
from maze_lab.core.wrappers.observation_preprocessing.preprocessors.rgb2gray import Rgb2GrayPreProcessor
from maze_lab.core.wrappers.observation_preprocessing.preprocessors.transpose import TransposePreProcessor
from maze_lab.core.wrappers.observation_preprocessing.preprocessors.unsqueeze import UnSqueezePreProcessor

__all__ = [
    "PRE_PROCESSOR_REGISTRY",
    "FlattenPreProcessor",
    "OneHotPreProcessor",
    "PreProcessor",
    "ResizeImgPreProcessor",
    "Rgb2GrayPreProcessor",
    "TransposePreProcessor",
    "UnSqueezePreProcessor",
]
