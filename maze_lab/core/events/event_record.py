"""A recorded call of an event-topic method."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class EventRecord:
    """One event: the topic interface, the method that was called and the bound arguments."""

    __slots__ = ("interface_class", "interface_method", "attributes")

    def __init__(self, interface_class: type, interface_method: Callable, attributes: dict[str, Any]):
        self.interface_class = interface_class
        self.interface_method = interface_method
        self.attributes = attributes

    @property
    def name(self) -> str:
        """``Topic.method`` of this event."""
        return f"{self.interface_class.__name__}.{self.interface_method.__name__}"

    def __repr__(self) -> str:
        return f"EventRecord({self.name}, {self.attributes})"
