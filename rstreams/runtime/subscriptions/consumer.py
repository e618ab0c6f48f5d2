"""A consumer of a subscription: what :meth:`Subscription.subscribe
<rstreams.runtime.subscriptions.subscription.Subscription.subscribe>` hands out. It
receives, acknowledges and gives back messages; the dispatch and the cursors are the
subscription's (every call runs on its state, under its lock or in Redis)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from rstreams.errors import ConfigError
from rstreams.runtime.subscriptions.errors import ConsumerClosedError
from rstreams.runtime.subscriptions.messages import Message, MessageRef, SubscriptionType

if TYPE_CHECKING:
    from rstreams.runtime.subscriptions.subscription import Subscription

__all__ = ["Consumer"]

T = TypeVar("T")


class _Inbox(dict[tuple[int, int], Message]):
    """Messages dispatched to a consumer and not yet received, in dispatch order."""

    def popitem_first(self) -> tuple[tuple[int, int], Message]:
        key = next(iter(self))
        return key, self.pop(key)


class Consumer:
    """A consumer of a :class:`Subscription`; made by :meth:`Subscription.subscribe`."""

    def __init__(self, subscription: Subscription, name: str, priority: int, seq: int) -> None:
        self.subscription = subscription
        self.name = name
        self.priority = priority
        self.seq = seq
        self._inbox = _Inbox()
        self._closed = False

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, priority={self.priority}, seq={self.seq})"

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise ConsumerClosedError(
                f"consumer {self.name!r} of subscription {self.subscription.name!r} is closed"
            )

    def _run(self, fn: Callable[[], T]) -> T:
        """``fn`` on the subscription's state, if this consumer is still connected."""

        def step() -> T:
            self._check()
            return fn()

        return self.subscription._apply(step)

    def receive(self, max_messages: int = 1, timeout: float = 0.0) -> list[Message]:
        """Up to ``max_messages`` messages; waits up to ``timeout`` seconds for the first.

        ``[]`` when nothing is available for this consumer (yet).
        """
        if max_messages < 0:
            raise ValueError(f"max_messages must be >= 0; got {max_messages}")
        sub = self.subscription
        deadline = time.monotonic() + timeout
        while True:
            got = self._run(lambda: sub._receive(self, max_messages) if max_messages else [])
            left = deadline - time.monotonic()
            if got or left <= 0 or not max_messages:
                return got
            # Appends to the broker do not notify us: poll, waking early on acks/joins.
            sub._pause(min(left, 0.01))

    def ack(self, messages: MessageRef | Iterable[MessageRef]) -> None:
        """Acknowledge messages (Message objects or ``(queue, offset)`` ids).

        Acknowledging twice does nothing; acknowledging a message of this subscription
        that another consumer holds is allowed (the cursor is the subscription's).
        """
        refs = _refs(messages)
        self._run(lambda: self.subscription._ack(refs))

    def ack_cumulative(self, message: MessageRef) -> None:
        """Acknowledge ``message`` and every earlier message of its queue (exclusive and
        failover subscriptions only, as in Pulsar)."""
        sub = self.subscription
        if sub.type not in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER):
            raise ConfigError(
                f"cumulative acknowledgement is not supported on {sub.type.value} "
                "subscriptions; acknowledge each message"
            )
        self._run(lambda: sub._ack([message], cumulative=True))

    def negative_acknowledge(self, messages: MessageRef | Iterable[MessageRef]) -> None:
        """Give messages back: they are dispatched again (to any eligible consumer)."""
        refs = _refs(messages)
        self._run(lambda: self.subscription._nack(refs))

    def ranges(self) -> list[tuple[int, int]]:
        """key_shared: the slot ranges this consumer owns now."""
        sel = self.subscription.selector
        if sel is None:
            raise ConfigError("only key_shared consumers own hash ranges")
        sub = self.subscription
        return sub._apply(lambda: list(sub.selector.ranges().get(self, [])))

    def close(self) -> None:
        """Leave the subscription; unacknowledged messages go to the other consumers."""
        if self._closed:
            return
        self.subscription._apply(lambda: self.subscription._remove(self))
        self._closed = True

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refs(messages: MessageRef | Iterable[MessageRef]) -> Sequence[MessageRef]:
    if isinstance(messages, Message):
        return [messages]
    if (
        isinstance(messages, tuple)
        and len(messages) == 2
        and all(isinstance(x, int) for x in messages)
    ):
        return [messages]  # type: ignore[list-item]
    return list(messages)  # type: ignore[arg-type]
