"""Exceptions raised by rstreams.

Every exception derives from :class:`RStreamsError` *and* from the builtin that best
describes it, so ``except ValueError`` keeps working for callers that do not know
rstreams::

    >>> from rstreams.errors import TopologyError
    >>> issubclass(TopologyError, ValueError)
    True
"""

from __future__ import annotations

import errno
import os


class RStreamsError(Exception):
    """Base class of every error rstreams raises on purpose."""


class TopologyError(RStreamsError, ValueError):
    """The pipeline cannot be compiled: a wrong argument, a missing step, a cycle..."""


class DuplicateStepError(TopologyError):
    """Two steps of one pipeline ended up with the same name."""


class MissingKeyError(TopologyError, AttributeError):
    """An operation that needs a key was called on a stream that has none.

    It is also an ``AttributeError`` because it is raised on attribute access
    (``stream.count``) of a stream that was never keyed.
    """


class InvalidFunctionError(RStreamsError, TypeError):
    """A step was given something that is not callable where a function was expected."""


class UnsupportedOperation(RStreamsError, NotImplementedError):
    """The operation exists in the DSL but is not supported (yet, or on this backend)."""


class SerdeError(RStreamsError, ValueError):
    """A value could not be serialized or deserialized."""


#: How a failed record's message tells a Python API user to keep going past it.
ON_ERROR_HINT = "(set on_error='skip' or 'dead-letter' to keep going)"
#: The same hint, as the ``rstreams run`` command spells the option.
CLI_ON_ERROR_HINT = (
    "(run with --on-error skip to keep going, or --on-error dead-letter to keep going and "
    "keep the failed records)"
)


class ProcessingError(RStreamsError, RuntimeError):
    """A record failed inside a step at run time.

    Carries where it happened so the message (and a dead-letter record) can name it.
    Its message ends with :data:`ON_ERROR_HINT`; :meth:`command_line_message` is the
    message with the command line's spelling of that hint.
    """

    def __init__(
        self,
        message: str,
        *,
        step: str | None = None,
        topic: str | None = None,
        queue: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.step = step
        self.topic = topic
        self.queue = queue
        self.offset = offset

    def command_line_message(self) -> str:
        """The message with the hint to keep going as ``rstreams run`` spells it.

        >>> e = ProcessingError("step 'x' failed " + ON_ERROR_HINT)
        >>> "on_error=" in e.command_line_message(), "--on-error skip" in e.command_line_message()
        (False, True)
        """
        return str(self).replace(ON_ERROR_HINT, CLI_ON_ERROR_HINT)


class PipelineFileError(RStreamsError, RuntimeError):
    """A pipeline file given to the CLI could not be loaded into a Topology."""


class ConfigError(RStreamsError, ValueError):
    """A runtime option or command-line value is invalid."""


class InputLineTooLongError(ConfigError):
    """An input line is longer than the run's ``max_line_bytes`` (``--max-line-bytes``):
    one line is one record, held whole in memory (exit 2)."""


class JobRunningError(ConfigError):
    """Another run of the same job is using its data directory (``rstreams run`` exits 2)."""


class JobLockLostError(RStreamsError, RuntimeError):
    """Another run took the job lock from this one (it paused past its lease): this run
    stopped writing and wrote no table (``rstreams run`` exits 1)."""


class StateStoreError(RStreamsError, RuntimeError):
    """A state store's local files cannot be opened or read (checksum mismatch, missing
    or damaged SST, bad manifest).

    A store error, never a record error: ``on_error`` does not apply to it. A store is a
    cache of its changelog, so the engine deletes the damaged local copy and rebuilds it
    from the changelog; the error only reaches the user if that is impossible.
    """

    def __init__(self, message: str, *, store: str | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.store = store
        self.path = path


class IllegalStateError(RStreamsError, RuntimeError):
    """An object was asked for something its lifecycle state does not allow: a task
    closed, or asked to move from one state to a state that can not follow it.

    >>> issubclass(IllegalStateError, RuntimeError)
    True
    """


class JobNeedsRebuildError(RStreamsError, RuntimeError):
    """Records a job had consumed were removed from its log (``rstreams topics repair``):
    its state and outputs cannot be trusted, so it only runs again with ``--fresh``."""


class StorageError(RStreamsError, OSError):
    """The job's data directory could not be written: the disk is full, read-only or
    failing, or the process may open no more files (``ulimit -n``). Nothing that was
    committed is lost, and nothing is committed on top of the commit that failed: once
    the disk (or the limit) is fixed, the same command resumes from the last commit.

    >>> import errno
    >>> e = OSError(errno.ENOSPC, "No space left on device", "/data/wc/log/x.log")
    >>> what, fix = str(StorageError.of(e)).split(": ", 1)
    >>> what
    'no space left on device writing /data/wc/log/x.log'
    >>> fix.startswith("free space on its file system"), fix.endswith("from the last commit")
    (True, True)
    """

    #: The errors of a disk (or of the open files limit) rather than of the program:
    #: reported as such, not retried.
    ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EMFILE,
                        errno.ENFILE})  # fmt: skip

    @classmethod
    def of(cls, e: OSError) -> StorageError:
        """The error to report for ``e``, one of :attr:`ERRNOS`."""
        if e.errno in (errno.EMFILE, errno.ENFILE):
            return cls(
                f"{too_many_open_files(e.errno)}, then run the same command again: it "
                "resumes from the last commit"
            )
        what = e.strerror or os.strerror(e.errno or 0)
        what = what[:1].lower() + what[1:]
        where = f" writing {e.filename}" if e.filename else ""
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = "free space on its file system (or give --data-dir another one)"
        elif e.errno == errno.EROFS:
            fix = "make the file system writable"
        else:
            fix = "check the disk (dmesg names the failing device)"
        return cls(
            f"{what}{where}: {fix}, then run the same command again: it resumes from the "
            "last commit"
        )


def too_many_open_files(code: int = errno.EMFILE) -> str:
    """What to say when a process may open no more files (``EMFILE``: its limit; or
    ``ENFILE``: the system's), and what to do.

    >>> too_many_open_files().startswith("too many open files: the limit is ")
    True
    """
    if code == errno.ENFILE:
        return (
            "too many open files on this system (its file table is full): close files "
            "elsewhere or raise fs.file-max"
        )
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        to = max(4096, soft * 4)
        how = f"e.g. `ulimit -n {to if hard == resource.RLIM_INFINITY else min(to, hard)}`"
    else:
        how = f"its hard limit is {hard} too: root raises that, in limits.conf or LimitNOFILE="
    return f"too many open files: the limit is {soft} (ulimit -n); raise it ({how})"


class FencedError(RStreamsError, RuntimeError):
    """A commit was refused because its writer was replaced (fenced): the fence it
    checks no longer holds the generation the writer had. Nothing of the commit was
    applied; the writer must stop and leave its work to the one that replaced it."""
