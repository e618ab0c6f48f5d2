"""Errors of the subscription layer (each also a builtin, like every rstreams error)."""

from __future__ import annotations

from rstreams.errors import RStreamsError


class ConsumerBusyError(RStreamsError, RuntimeError):
    """A consumer cannot join: e.g. an exclusive subscription already has its consumer."""


class ConsumerAssignError(RStreamsError, ValueError):
    """A Key_Shared selector cannot give a consumer key hashes: no range left to split,
    overlapping or empty hash ranges, or a consumer added twice."""


class ConsumerClosedError(RStreamsError, RuntimeError):
    """An operation on a consumer that was closed (or whose subscription was closed)."""
