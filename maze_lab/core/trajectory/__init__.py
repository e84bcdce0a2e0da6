"""Trajectory recording: step and episode records, the recording wrapper, episode files (no pickle) and the frames
recorded for envs whose renderer cannot redraw a recorded state."""

from maze_lab.core.trajectory.files import (
    EpisodeData,
    NotATrajectoryFileError,
    TrajectoryLimits,
    TrajectoryTooLargeError,
    list_episodes,
    load_episode,
    read_episode_header,
)
from maze_lab.core.trajectory.frames import EpisodeFrames
from maze_lab.core.trajectory.recorder import TrajectoryRecordingWrapper
from maze_lab.core.trajectory.records import (
    EpisodeRecord,
    StepRecord,
    SubStepRecord,
    event_view,
    rebuild_renderer,
)
from maze_lab.core.trajectory.serialization import ClassAllowList, UntrustedClassWarning

__all__ = [
    "ClassAllowList", "EpisodeData", "EpisodeFrames", "EpisodeRecord", "NotATrajectoryFileError", "StepRecord",
    "SubStepRecord", "TrajectoryLimits", "TrajectoryRecordingWrapper", "TrajectoryTooLargeError",
    "UntrustedClassWarning", "event_view", "list_episodes", "load_episode", "read_episode_header", "rebuild_renderer",
]
