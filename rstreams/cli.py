"""The ``rstreams`` command.

Exit codes: 0 success, 1 a record failed processing (or another runtime failure),
2 bad usage or configuration, 3 the pipeline file could not be loaded, 130 interrupted
by Ctrl-C (SIGINT), 141 stdout's reader went away before all was written, 143 stopped
by SIGTERM (an interruption exits 128 + the signal's number, as shells report it).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from rstreams import __version__, interrupts
from rstreams.cli_run import add_run_parser
from rstreams.errors import (
    ConfigError,
    PipelineFileError,
    ProcessingError,
    RStreamsError,
    StorageError,
    TopologyError,
    UnsupportedOperation,
)
from rstreams.loader import load_topology

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PIPELINE = 0, 1, 2, 3

log = logging.getLogger("rstreams")


def cmd_graph(args: argparse.Namespace) -> int:
    from rstreams.runtime.results import check_output_path

    check_output_path(args.output, "-o")
    topology = load_topology(args.pipeline)
    path = topology.render(args.output, args.format)
    if not args.quiet:
        print(f"wrote {path}", file=sys.stderr)
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    sys.stdout.write(load_topology(args.pipeline).describe())
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    # Exit codes as diff(1): 0 nothing lost, 1 state would be lost or misread, 2 trouble.
    try:
        old, new = load_topology(args.old), load_topology(args.new)
    except PipelineFileError as e:
        return _fail(EXIT_USAGE, str(e))
    d = old.diff(new)
    if args.json:
        sys.stdout.write(d.to_json())
    elif not args.quiet:
        sys.stdout.write(d.describe())
    return EXIT_FAILED if d.loses_state else EXIT_OK


# -- argument parsing ---------------------------------------------------------------------


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", help="print only results and errors")
    g.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)"
    )


PIPELINE_HELP = "a Python file whose build() returns a Topology or a StreamBuilder"


#: The commands whose parsers (and code) live in other modules, by module: a module is
#: imported only to run one of its commands, or to list or check every command (its
#: imports, rich and the Spark packer among them, cost a run a tenth of a second).
MODULE_COMMANDS: dict[str, tuple[str, ...]] = {
    "rstreams.admin": ("topics", "produce", "consume", "offsets", "state", "group"),
    "rstreams.live": ("top",),
    "rstreams.runtime.spark.packenv": ("spark",),
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line (the command, what is wrong,
    a close option name where one was mistyped, and where the options are listed)
    instead of a usage block of twenty lines with the error under it. Its subparsers are
    of this class too (argparse gives them the class of their parent)."""

    #: The command the arguments name (set on the top parser), for the errors it reports
    #: about them: unknown arguments are found by the top parser, not the command's.
    command: argparse.ArgumentParser | None = None

    def error(self, message: str) -> NoReturn:
        parser = self.command if self.command is not None else self
        hint = _did_you_mean(parser, message)
        listed = "commands" if parser._subparsers is not None else "options"
        self.exit(
            EXIT_USAGE,
            f"{parser.prog}: error: {message}{hint}; `{parser.prog} --help` lists the {listed}\n",
        )


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """' (did you mean --input?)' for an unrecognized option close to one of ``parser``'s."""
    if not message.startswith("unrecognized arguments: "):
        return ""
    options = [s for a in parser._actions for s in a.option_strings]
    guesses = []
    for word in message.removeprefix("unrecognized arguments: ").split():
        if word.startswith("-"):
            guesses += difflib.get_close_matches(word.partition("=")[0], options, n=1)
    return f" (did you mean {', '.join(guesses)}?)" if guesses else ""


def _add_pipeline_commands(sub: Any) -> None:
    """``graph`` and ``describe``: what a pipeline file's topology looks like."""
    graph = sub.add_parser(
        "graph",
        help="draw a pipeline's topology",
        description="Render the topology as SVG, PNG, PDF or DOT (format from the extension).",
    )
    graph.add_argument("pipeline", metavar="PIPELINE.py", help=PIPELINE_HELP)
    graph.add_argument(
        "-o", "--output", required=True, metavar="OUT", help="OUT.svg|.png|.pdf|.dot"
    )
    graph.add_argument(
        "--format", choices=("svg", "png", "pdf", "dot"), help="override the extension"
    )
    _common(graph)
    graph.set_defaults(func=cmd_graph)

    describe = sub.add_parser(
        "describe",
        help="print a pipeline's topology as text",
        description="Print sub-topologies, processors, topics and state stores.",
    )
    describe.add_argument("pipeline", metavar="PIPELINE.py", help=PIPELINE_HELP)
    _common(describe)
    describe.set_defaults(func=cmd_describe)


def _add_diff(sub: Any) -> None:
    """``diff``: what changing a pipeline would do to its job's state."""
    diff = sub.add_parser(
        "diff",
        help="what changing a pipeline would do to its job's state",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Compare two versions of a pipeline: steps added, removed or renamed (a step
moved in its chain gets another generated name), internal topics and stores
whose name, serde, window or queue count changed, and which state would be
lost (orphaned under its old name) or misread. A kept store or sink topic
with a changed step before it (added, removed, moved, other code) is STALE:
a resumed job does not read the input it already consumed again, so the
change applies to new input only; --fresh recomputes from all input.

exit codes: 0 no state lost, 1 some state would be lost or misread,
2 bad usage or a pipeline file that does not load (stale alone is 0:
the change is compatible)""",
        epilog="""\
example:
  rstreams diff wordcount.py wordcount_v2.py
  rstreams diff wordcount.py wordcount_v2.py --json

Give a stateful step a name (e.g. .count(name="word-count")) and its store
keeps that name whatever you change around it.""",
    )
    diff.add_argument("old", metavar="OLD.py", help="the pipeline the job ran with")
    diff.add_argument("new", metavar="NEW.py", help="the changed pipeline")
    diff.add_argument(
        "--json",
        action="store_true",
        help='print the diff as JSON (format 2: "loses_state", "stale", and each step, topic '
        'and store with its "status" and "effect")',
    )
    _common(diff)
    diff.set_defaults(func=cmd_diff)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``rstreams`` command's parser. With ``command`` (the one about to run), the
    commands of :data:`MODULE_COMMANDS` other modules define are left out unless it is
    one of theirs; an unknown ``command`` gets every command (to list them)."""
    parser = _Parser(
        prog="rstreams",
        description="Run, describe and draw rstreams pipelines.",
        epilog="A pipeline file defines build() returning a Topology or a StreamBuilder.",
    )
    parser.add_argument("--version", action="version", version=f"rstreams {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    add_run_parser(sub, _common, PIPELINE_HELP)

    _add_pipeline_commands(sub)
    _add_diff(sub)

    known = command in sub.choices or any(command in c for c in MODULE_COMMANDS.values())

    def wanted(module: str) -> bool:
        return command is None or not known or command in MODULE_COMMANDS[module]

    if wanted("rstreams.admin"):
        from rstreams.admin import add_parsers

        add_parsers(sub, _common)
    if wanted("rstreams.live"):
        from rstreams.live import add_parsers as add_live_parsers

        add_live_parsers(sub, _common)
    if wanted("rstreams.runtime.spark.packenv"):
        from rstreams.runtime.spark.packenv import add_parsers as add_spark_parsers

        add_spark_parsers(sub, _common)
    return parser


#: The exit code of a command whose reader closed its stdout before all was written.
EXIT_BROKEN_PIPE = 128 + 13


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is no option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def _chosen_command(
    parser: argparse.ArgumentParser, words: Sequence[str]
) -> argparse.ArgumentParser | None:
    """The parser of the (sub)command ``words`` name, ``spark pack-env``'s for
    ``spark pack-env -o x``; None when they name none."""
    chosen = None
    for word in words:
        if word.startswith("-"):
            continue
        sub = parser._subparsers
        choices = sub._group_actions[0].choices if sub is not None else None
        if not isinstance(choices, dict) or word not in choices:
            break
        chosen = parser = choices[word]
    return chosen


def _fail(code: int, msg: str) -> int:
    print(f"rstreams: error: {msg}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: the process's arguments); its exit code."""
    interrupts.reset()
    try:
        try:
            code = _main(argv)
        except SystemExit:  # argparse's --help, --version and usage errors
            _flush_stdout()
            raise
        # What is still buffered (stdout into a pipe is block-buffered): a reader that
        # went away must show here, not as Python's "Exception ignored" and 120 at exit.
        _flush_stdout()
        return code
    except BrokenPipeError:
        # The reader went away (`... | head`): the output was not delivered. Exit as
        # Unix tools killed by SIGPIPE do (128 + 13), without a traceback; stdout goes to
        # /dev/null so that flushing it at exit does not complain.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _flush_stdout() -> None:
    if sys.stdout is not None:
        sys.stdout.flush()


def _main(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command_of(words))
    if isinstance(parser, _Parser):
        parser.command = _chosen_command(parser, words)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    level = logging.WARNING
    if args.quiet:
        level = logging.ERROR
    elif args.verbose:
        level = logging.INFO if args.verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # SIGINT and SIGTERM stop any command as Ctrl-C does (`run` stops its workers), also
    # where they were inherited ignored (a background job of a script); the exit code is
    # 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM.
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _raise_interrupt) for sig in _STOP_SIGNALS}
    try:
        code: int = args.func(args)
        return code
    except PipelineFileError as e:
        if args.verbose and e.__cause__ is not None:
            traceback.print_exception(e.__cause__)
        return _fail(EXIT_PIPELINE, str(e))
    except ProcessingError as e:
        return _fail(EXIT_FAILED, e.command_line_message())
    except (ConfigError, UnsupportedOperation, TopologyError) as e:
        return _fail(EXIT_USAGE, str(e))
    except RStreamsError as e:
        return _fail(EXIT_FAILED, str(e))
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:
        raise  # (main's: stdout's reader went away; not a storage error)
    except OSError as e:
        if e.errno not in StorageError.ERRNOS:
            raise  # anything else is a bug: its traceback
        # The data directory's disk is full or failing (an ingest append, statistics).
        return _fail(EXIT_FAILED, str(StorageError.of(e)))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum: int, frame: Any) -> None:
    interrupts.note(signum)
    raise KeyboardInterrupt


def _interrupted() -> int:
    """Exit 128 + the number of the signal that stopped the command (see the interrupts
    module): 130 for Ctrl-C (SIGINT) or a plain KeyboardInterrupt, 143 for SIGTERM."""
    sig = interrupts.received()
    return _fail(
        interrupts.exit_code(),
        "interrupted" if sig == signal.SIGINT else f"interrupted ({sig.name})",
    )


if __name__ == "__main__":
    sys.exit(main())
