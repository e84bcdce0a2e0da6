"""Pubsub: topics as interfaces whose calls are events, subscribers, step events."""

from __future__ import annotations

from abc import ABC

import pytest
from scripted_env import ScriptCoreEnv, ScriptEvents, make_script_env

from maze_lab.core.env.interfaces import RewardAggregatorInterface
from maze_lab.core.events.pubsub import EventService, Pubsub, Subscriber


class PieceEvents(ABC):
    def piece_discarded(self, piece: tuple):
        """A piece was discarded."""

    def cut(self, width: int, height: int = 1):
        """A cut."""


def test_topic_call_records_event_with_bound_arguments():
    service = EventService()
    topic = Pubsub(service).create_event_topic(PieceEvents)
    topic.piece_discarded(piece=(50, 30))
    topic.cut(3, height=4)
    events = service.get_step_events()
    assert [e.name for e in events] == ["PieceEvents.piece_discarded", "PieceEvents.cut"]
    assert events[0].attributes == {"piece": (50, 30)}
    assert events[1].attributes == {"width": 3, "height": 4}
    assert events[1].interface_method is PieceEvents.cut
    assert PieceEvents in service.topics


def test_topic_rejects_unknown_arguments():
    topic = EventService().create_event_topic(PieceEvents)
    with pytest.raises(TypeError, match="unknown argument.*valid: \\['piece'\\]"):
        topic.piece_discarded(size=(1, 2))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        topic.cut(1, 2, 3)


def test_subscriber_receives_only_declared_topics():
    class Other(ABC):
        def ping(self):
            """Ping."""

    class Collector(Subscriber):
        def __init__(self):
            self.got = []

        def get_interfaces(self):
            return [PieceEvents]

        def notify_event(self, event):
            self.got.append(event.interface_method.__name__)

    service = EventService()
    pubsub = Pubsub(service)
    collector = Collector()
    pubsub.register_subscriber(collector)
    pubsub.create_event_topic(PieceEvents).cut(width=2)
    pubsub.create_event_topic(Other).ping()
    assert collector.got == ["cut"]


def test_reward_aggregator_from_events():
    class HitReward(RewardAggregatorInterface):
        def get_interfaces(self):
            return [ScriptEvents]

        def summarize_reward(self, maze_state=None):
            return -float(len(self.query_events(ScriptEvents.hit)))

    core = ScriptCoreEnv()
    agg = HitReward()
    core.pubsub.register_subscriber(agg)
    core.reset()
    agg.reset()
    core.step(3)
    assert agg.summarize_reward() == -3.0


def test_env_step_events_are_those_of_the_last_step():
    env = make_script_env(5)
    env.reset()
    env.step({"n": 2})
    assert [e.interface_method for e in env.get_step_events()] == [ScriptEvents.hit, ScriptEvents.hit,
                                                                    ScriptEvents.level]
    env.step({"n": 0})
    assert [e.interface_method for e in env.get_step_events()] == [ScriptEvents.level]
    assert env.get_env_time() == 2
