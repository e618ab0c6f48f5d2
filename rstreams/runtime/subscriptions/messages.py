"""What a subscription's API speaks in: its :class:`SubscriptionType` and the
:class:`Message` a consumer receives (and acknowledges, by the message or its id)."""

from __future__ import annotations

import enum

import attrs

from rstreams.errors import ConfigError
from rstreams.runtime.queues.base import Headers

__all__ = ["Message", "MessageRef", "SubscriptionType"]


class SubscriptionType(str, enum.Enum):
    EXCLUSIVE = "exclusive"
    SHARED = "shared"
    FAILOVER = "failover"
    KEY_SHARED = "key_shared"

    @classmethod
    def parse(cls, value: SubscriptionType | str) -> SubscriptionType:
        if isinstance(value, SubscriptionType):
            return value
        try:
            return cls(str(value).lower().replace("-", "_"))
        except ValueError:
            choices = ", ".join(repr(t.value) for t in cls)
            raise ConfigError(
                f"unknown subscription_type {value!r}; choose one of {choices}"
            ) from None


@attrs.frozen
class Message:
    """A message as a consumer receives it; ``id`` is what :meth:`Consumer.ack` takes."""

    topic: str
    queue: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers = ()
    #: how many times it was handed to a consumer before and came back unacknowledged
    redelivery_count: int = 0

    @property
    def id(self) -> tuple[int, int]:
        return (self.queue, self.offset)


MessageRef = Message | tuple[int, int]
