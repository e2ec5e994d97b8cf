"""``kubedl-py``'s entry point: parse, set up logging, run the command's handler, map errors to exit codes.

Job commands log only warnings (their output is their answer; ``--debug`` shows everything); the
long-running commands (``local up``, ``controller``) log what they do. Writing into a closed pipe
(``kubedl-py logs X | head -1``) ends the command quietly with 141, as a Unix tool killed by SIGPIPE does.
"""

from __future__ import annotations

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
    args = parser.parse_args(argv)
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


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
