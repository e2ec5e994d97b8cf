"""``kubedl-py``'s entry point: parse, set up logging, run the command's handler, map errors to exit codes.

Job commands log only warnings (their output is their answer; ``--debug`` shows everything); the
long-running commands (``local up``, ``controller``) log what they do. Writing into a closed pipe
(``kubedl-py logs X | head -1``) ends the command quietly with 141, as a Unix tool killed by SIGPIPE does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

from kubedl_py.cli.errors import EXIT_INTERRUPTED, EXIT_USAGE, UsageError
from kubedl_py.cli.parser import Handler, build_parser

#: 128 + SIGPIPE: what a shell reports for a tool that wrote into a closed pipe
EXIT_BROKEN_PIPE: Final = 141
_CHATTY_COMMANDS: Final = ("local", "controller")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # as parse_args would, but with the usage of the command that was given, not the top level's
        chosen_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "submit":
        if (args.file is None) == (args.filename is None):
            chosen_parser(parser, args).error("give the jobs' file once: FILE or -f FILE")
        args.file = args.file if args.file is not None else args.filename
    if args.debug:
        level = logging.DEBUG
    elif args.command in _CHATTY_COMMANDS:
        level = logging.INFO
    else:
        level = logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return handler(args)
    except UsageError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command's parser ``args`` were parsed by: followed down the subparsers by their ``dest``."""
    while True:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions:
            return parser
        chosen = getattr(args, actions[0].dest or "", None)
        if chosen is None or chosen not in actions[0].choices:
            return parser
        parser = actions[0].choices[chosen]


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
