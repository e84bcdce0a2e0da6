"""Event topics, the per-env event service and the publish/subscribe broker."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from maze_lab.core.events.event_record import EventRecord

T = TypeVar("T")


class Subscriber(ABC):
    """Receives the events of the topics it declares."""

    @abstractmethod
    def get_interfaces(self) -> list[type]:
        """The event topics (interface classes) this subscriber wants."""

    @abstractmethod
    def notify_event(self, event: EventRecord) -> None:
        """Called for each event of a declared topic."""


def event_methods(interface: type) -> dict[str, Callable]:
    """The public methods of an event topic interface (methods whose calls are events)."""
    methods = {}
    for name, member in inspect.getmembers(interface, predicate=inspect.isfunction):
        if not name.startswith("_"):
            methods[name] = member
    return methods


def _param_names(method: Callable) -> tuple[str, ...]:
    params = list(inspect.signature(method).parameters.values())[1:]  # drop self
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def make_topic_proxy(interface: type[T], sink: Callable[[EventRecord], None]) -> T:
    """Build an object with the interface's methods; each call becomes an EventRecord sent to ``sink``."""
    namespace: dict[str, Any] = {}
    for name, method in event_methods(interface).items():
        names = _param_names(method)
        namespace[name] = _make_dispatch(interface, method, names, sink)
    proxy_cls = type(f"{interface.__name__}Proxy", (), namespace)
    return proxy_cls()


def _make_dispatch(interface: type, method: Callable, names: tuple[str, ...], sink: Callable) -> Callable:
    n_names = len(names)

    def dispatch(_self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > n_names:
            raise TypeError(
                f"{interface.__name__}.{method.__name__} takes {n_names} arguments {names}, got {len(args)}")
        attributes = dict(zip(names, args, strict=False)) if args else {}
        if kwargs:
            unknown = [k for k in kwargs if k not in names]
            if unknown:
                raise TypeError(
                    f"{interface.__name__}.{method.__name__} got unknown argument(s) {unknown}; valid: {list(names)}"
                )
            attributes.update(kwargs)
        sink(EventRecord(interface, method, attributes))

    dispatch.__name__ = method.__name__
    dispatch.__doc__ = method.__doc__
    return dispatch


class EventCollection:
    """The events of one step, queryable by event method or topic."""

    __slots__ = ("events",)

    def __init__(self, events: Iterable[EventRecord] = ()):
        self.events = list(events)

    def query_events(self, event_spec: Callable | type | Iterable[Callable | type]) -> list[EventRecord]:
        """Events matching a method (``Topic.method``), a topic class or a list of those."""
        specs = list(event_spec) if isinstance(event_spec, list | tuple | set) else [event_spec]
        out = []
        for ev in self.events:
            for spec in specs:
                if ev.interface_method is spec or ev.interface_class is spec:
                    out.append(ev)
                    break
        return out

    def __iter__(self):
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)


class EventService:
    """Records every event of the current step and routes it to subscribers."""

    def __init__(self) -> None:
        self._step_events: list[EventRecord] = []
        self._subscribers: dict[type, list[Subscriber]] = {}
        self.topics: list[type] = []

    def record(self, event: EventRecord) -> None:
        """Store an event for this step and notify the subscribers of its topic."""
        self._step_events.append(event)
        subs = self._subscribers.get(event.interface_class)
        if subs:
            for sub in subs:
                sub.notify_event(event)

    def create_event_topic(self, interface: type[T]) -> T:
        """A proxy of ``interface`` whose calls are recorded as events."""
        if interface not in self.topics:
            self.topics.append(interface)
        return make_topic_proxy(interface, self.record)

    def register_subscriber(self, subscriber: Subscriber) -> None:
        """Route the subscriber's declared topics to it."""
        for interface in subscriber.get_interfaces():
            self._subscribers.setdefault(interface, []).append(subscriber)

    def get_step_events(self) -> list[EventRecord]:
        """Events recorded since the last ``clear_step``."""
        return self._step_events

    def clear_step(self) -> None:
        """Start recording a new step."""
        self._step_events = []


class Pubsub:
    """Message broker of a core env: topics, subscribers and dispatch on top of an EventService."""

    def __init__(self, event_service: EventService):
        self.event_service = event_service

    def create_event_topic(self, interface: type[T]) -> T:
        """Create a topic proxy; calling its methods publishes events."""
        return self.event_service.create_event_topic(interface)

    def register_subscriber(self, subscriber: Subscriber) -> None:
        """Register a subscriber (e.g. a reward aggregator) for the topics it declares."""
        self.event_service.register_subscriber(subscriber)
