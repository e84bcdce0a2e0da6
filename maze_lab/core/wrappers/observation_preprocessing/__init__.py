"""Observation pre-processing: the PreProcessingWrapper and its pre-processors."""

from maze_lab.core.wrappers.observation_preprocessing.preprocessing_wrapper import (
    PreProcessingWrapper,
    resolve_pre_processor,
)
from maze_lab.core.wrappers.observation_preprocessing.preprocessors import (
    PRE_PROCESSOR_REGISTRY,
    FlattenPreProcessor,
    OneHotPreProcessor,
    PreProcessor,
    ResizeImgPreProcessor,
    Rgb2GrayPreProcessor,
    TransposePreProcessor,
    UnSqueezePreProcessor,
)

__all__ = [
    "PRE_PROCESSOR_REGISTRY",
    "FlattenPreProcessor",
    "OneHotPreProcessor",
    "PreProcessingWrapper",
    "PreProcessor",
    "ResizeImgPreProcessor",
    "Rgb2GrayPreProcessor",
    "TransposePreProcessor",
    "UnSqueezePreProcessor",
    "resolve_pre_processor",
]
